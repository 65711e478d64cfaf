//! A minimal synchronous RESP2 client: enough to probe and poke Redis in tests.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::TestbedError;

/// One RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RespValue {
    /// `+OK`.
    Simple(String),
    /// `-ERR ...` (a value, not a Rust error: the command reached Redis).
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$3\r\nabc`, `None` for the nil bulk string.
    Bulk(Option<Vec<u8>>),
    /// `*2 ...`, `None` for the nil array.
    Array(Option<Vec<RespValue>>),
}

impl RespValue {
    /// The bytes of a simple or bulk string reply.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            RespValue::Simple(s) => Some(s.as_bytes()),
            RespValue::Bulk(Some(b)) => Some(b),
            _ => None,
        }
    }

    /// The text of a simple or bulk string reply, if it is UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        self.as_bytes().and_then(|b| std::str::from_utf8(b).ok())
    }

    /// The integer of an integer reply.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            RespValue::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// True for a nil bulk string or nil array.
    pub fn is_nil(&self) -> bool {
        matches!(self, RespValue::Bulk(None) | RespValue::Array(None))
    }
}

/// Encode a command as a RESP array of bulk strings.
pub(crate) fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn bad(detail: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, detail.into())
}

fn read_line(r: &mut impl BufRead) -> std::io::Result<String> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed before a full reply",
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(bad("reply line without CRLF"));
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|_| bad("reply line is not UTF-8"))
}

/// Read one RESP2 value.
pub(crate) fn read_value(r: &mut impl BufRead) -> std::io::Result<RespValue> {
    let line = read_line(r)?;
    let (kind, rest) = line.split_at(line.chars().next().map_or(0, |c| c.len_utf8()));
    let int = |s: &str| {
        s.parse::<i64>()
            .map_err(|_| bad(format!("bad integer {s:?}")))
    };
    Ok(match kind {
        "+" => RespValue::Simple(rest.to_string()),
        "-" => RespValue::Error(rest.to_string()),
        ":" => RespValue::Int(int(rest)?),
        "$" => {
            let n = int(rest)?;
            if n < 0 {
                RespValue::Bulk(None)
            } else {
                let mut buf = vec![0; n as usize + 2];
                r.read_exact(&mut buf)?;
                buf.truncate(n as usize);
                RespValue::Bulk(Some(buf))
            }
        }
        "*" => {
            let n = int(rest)?;
            if n < 0 {
                RespValue::Array(None)
            } else {
                let mut items = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    items.push(read_value(r)?);
                }
                RespValue::Array(Some(items))
            }
        }
        _ => return Err(bad(format!("unknown reply type in {line:?}"))),
    })
}

/// Send one command to the Redis at `addr` over a fresh connection and read the reply.
///
/// `timeout` bounds the connect, the write and the read separately. A paused server
/// gives an error for which [`TestbedError::is_timeout`] is true; a reset connection
/// one for which [`TestbedError::is_connection_error`] is true. A Redis error reply is
/// `Ok(RespValue::Error(..))`.
pub fn resp_command(
    addr: SocketAddr,
    args: &[&str],
    timeout: Duration,
) -> Result<RespValue, TestbedError> {
    RespConnection::connect(addr, timeout)?.cmd(args)
}

/// A persistent RESP connection (for example through a [`Proxy`](crate::Proxy), to see
/// what an open client connection experiences). Synchronous; every read and write is
/// bounded by the timeout.
#[derive(Debug)]
pub struct RespConnection {
    reader: BufReader<TcpStream>,
    addr: SocketAddr,
}

impl RespConnection {
    /// Connect to `addr`; `timeout` bounds the connect and every later read and write.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> Result<RespConnection, TestbedError> {
        let ctx = format!("Redis connection to {addr}");
        let stream = TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| TestbedError::io(format!("{ctx}: connect"), e))?;
        let conn = RespConnection {
            reader: BufReader::new(stream),
            addr,
        };
        conn.set_timeout(timeout)?;
        conn.reader
            .get_ref()
            .set_nodelay(true)
            .map_err(|e| TestbedError::io(format!("{ctx}: socket options"), e))?;
        Ok(conn)
    }

    /// Change the read and write timeout.
    pub fn set_timeout(&self, timeout: Duration) -> Result<(), TestbedError> {
        let stream = self.reader.get_ref();
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|_| stream.set_write_timeout(Some(timeout)))
            .map_err(|e| {
                TestbedError::io(
                    format!("Redis connection to {}: socket options", self.addr),
                    e,
                )
            })
    }

    /// The server (or proxy) address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Send one command without reading its reply (pipelining).
    pub fn send(&mut self, args: &[&str]) -> Result<(), TestbedError> {
        let cmd_name = args.first().copied().unwrap_or("");
        self.reader
            .get_mut()
            .write_all(&encode(args))
            .map_err(|e| TestbedError::io(format!("Redis {cmd_name} to {}: write", self.addr), e))
    }

    /// Read the next reply.
    pub fn read_reply(&mut self) -> Result<RespValue, TestbedError> {
        read_value(&mut self.reader)
            .map_err(|e| TestbedError::io(format!("Redis reply from {}: read", self.addr), e))
    }

    /// Send one command and read its reply.
    pub fn cmd(&mut self, args: &[&str]) -> Result<RespValue, TestbedError> {
        self.send(args)?;
        self.read_reply()
    }
}

/// `Ok` if `reply` (to `args`, sent to `addr`) is `+OK`, else a protocol
/// error naming the command.
pub(crate) fn expect_ok(
    addr: std::net::SocketAddr,
    args: &[&str],
    reply: RespValue,
) -> Result<(), crate::TestbedError> {
    match reply {
        RespValue::Simple(s) if s == "OK" => Ok(()),
        other => Err(crate::TestbedError::protocol(
            format!("{} on {addr}", args.join(" ")),
            format!("{other:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nested_replies() {
        let raw = b"*3\r\n+OK\r\n$-1\r\n*2\r\n:7\r\n$2\r\nab\r\n";
        let v = read_value(&mut &raw[..]).unwrap();
        assert_eq!(
            v,
            RespValue::Array(Some(vec![
                RespValue::Simple("OK".into()),
                RespValue::Bulk(None),
                RespValue::Array(Some(vec![
                    RespValue::Int(7),
                    RespValue::Bulk(Some(b"ab".to_vec()))
                ])),
            ]))
        );
        let e = read_value(&mut &b"-ERR x\r\n"[..]).unwrap();
        assert_eq!(e, RespValue::Error("ERR x".into()));
        assert!(read_value(&mut &b"$5\r\nab"[..]).is_err());
    }

    #[test]
    fn encodes_bulk_arrays() {
        assert_eq!(
            encode(&["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
        );
    }
}
