//! What the fault proxy needs to know of Redis pub/sub: whether a client
//! subscribed, and where one server frame ends, so that a message can be
//! delivered late or twice without cutting another frame in half.

/// Whether `chunk` (client bytes) holds a Redis subscribe command
/// (`SUBSCRIBE`, `PSUBSCRIBE`, `SSUBSCRIBE`, any case).
pub(crate) fn holds_subscribe(chunk: &[u8]) -> bool {
    const WORD: &[u8] = b"subscribe";
    chunk
        .windows(WORD.len())
        .any(|w| w.eq_ignore_ascii_case(WORD))
}

/// Splits what a server sends into whole RESP2/RESP3 frames.
#[derive(Debug, Default)]
pub(crate) struct Frames {
    pending: Vec<u8>,
    /// A frame could not be parsed: from then on bytes pass as they come.
    broken: bool,
}

impl Frames {
    /// Adds `bytes` and returns the whole frames they complete, in order,
    /// concatenated (empty while a frame is incomplete). Once the stream
    /// cannot be parsed, returns every byte at once.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        self.pending.extend_from_slice(bytes);
        if self.broken {
            return vec![std::mem::take(&mut self.pending)];
        }
        let mut frames = Vec::new();
        loop {
            match frame_len(&self.pending) {
                Ok(Some(n)) => {
                    let rest = self.pending.split_off(n);
                    frames.push(std::mem::replace(&mut self.pending, rest));
                }
                Ok(None) => break,
                Err(()) => {
                    self.broken = true;
                    frames.push(std::mem::take(&mut self.pending));
                    break;
                }
            }
        }
        frames
    }
}

/// Whether `frame` is a pub/sub message push (`message`, `pmessage`,
/// `smessage`), not a reply.
pub(crate) fn is_message(frame: &[u8]) -> bool {
    if !matches!(frame.first(), Some(b'*' | b'>')) {
        return false;
    }
    let Some(header) = line_end(frame, 0) else {
        return false;
    };
    let first = &frame[header..];
    [
        &b"$7\r\nmessage\r\n"[..],
        b"$8\r\npmessage\r\n",
        b"$8\r\nsmessage\r\n",
    ]
    .iter()
    .any(|m| first.starts_with(m))
}

/// The index just past the CRLF of the line starting at `at`.
fn line_end(buf: &[u8], at: usize) -> Option<usize> {
    buf.get(at..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| at + i + 2)
}

/// The length of the first whole frame of `buf`: `Ok(None)` while it is
/// incomplete, `Err` if it is not RESP.
fn frame_len(buf: &[u8]) -> Result<Option<usize>, ()> {
    value_end(buf, 0)
}

fn value_end(buf: &[u8], at: usize) -> Result<Option<usize>, ()> {
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some(end) = line_end(buf, at) else {
        return Ok(None);
    };
    let number = || -> Result<i64, ()> {
        std::str::from_utf8(&buf[at + 1..end - 2])
            .map_err(|_| ())?
            .parse::<i64>()
            .map_err(|_| ())
    };
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Ok(Some(end)),
        b'$' | b'=' | b'!' => {
            let n = number()?;
            if n < 0 {
                return Ok(Some(end));
            }
            let total = end + n as usize + 2;
            Ok((buf.len() >= total).then_some(total))
        }
        b'*' | b'>' | b'~' | b'%' | b'|' => {
            let n = number()?;
            let items = if matches!(kind, b'%' | b'|') {
                n.max(0) * 2
            } else {
                n.max(0)
            };
            let mut pos = end;
            for _ in 0..items {
                match value_end(buf, pos)? {
                    Some(p) => pos = p,
                    None => return Ok(None),
                }
            }
            if kind == b'|' {
                // An attribute precedes the value it describes.
                return value_end(buf, pos);
            }
            Ok(Some(pos))
        }
        _ => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_frames_come_out_whole_whatever_the_chunks() {
        let stream = b"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$5\r\nhello\r\n+OK\r\n";
        for cut in 1..stream.len() {
            let mut f = Frames::default();
            let mut out = f.push(&stream[..cut]);
            out.extend(f.push(&stream[cut..]));
            assert_eq!(out.len(), 3, "cut at {cut}: {out:?}");
            assert_eq!(out.concat(), stream.to_vec());
            assert!(!is_message(&out[0]));
            assert!(is_message(&out[1]));
            assert!(!is_message(&out[2]));
        }
    }

    #[test]
    fn resp3_pushes_and_maps_are_frames() {
        let mut f = Frames::default();
        let push = b">3\r\n$8\r\nsmessage\r\n$1\r\nc\r\n$2\r\nhi\r\n";
        let map = b"%1\r\n+a\r\n:1\r\n";
        let out = f.push(&[&push[..], &map[..]].concat());
        assert_eq!(out, vec![push.to_vec(), map.to_vec()]);
        assert!(is_message(&out[0]));
    }

    #[test]
    fn what_is_not_resp_passes_unparsed() {
        let mut f = Frames::default();
        assert_eq!(f.push(b"?garbage\r\n"), vec![b"?garbage\r\n".to_vec()]);
        assert_eq!(f.push(b"more"), vec![b"more".to_vec()]);
    }

    #[test]
    fn subscribe_commands_are_recognised() {
        assert!(holds_subscribe(b"*2\r\n$9\r\nSUBSCRIBE\r\n$1\r\nc\r\n"));
        assert!(holds_subscribe(b"*2\r\n$10\r\nssubscribe\r\n$1\r\nc\r\n"));
        assert!(!holds_subscribe(b"*2\r\n$3\r\nGET\r\n$1\r\nc\r\n"));
    }
}
