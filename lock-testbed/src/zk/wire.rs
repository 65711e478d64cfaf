//! What the testbed says to a ZooKeeper server itself: four-letter words
//! (`srvr`, ...) and a minimal jute-protocol session (connect, a few
//! requests, close), so that no client library is needed to check a server.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::TestbedError;

/// How long one request to a server may take.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// `Mode: X` of a `srvr` answer.
pub(super) fn mode_of(answer: &str) -> Option<&str> {
    answer
        .lines()
        .find_map(|l| l.strip_prefix("Mode:"))
        .map(str::trim)
}

/// Send a four-letter word and read the answer until the server closes.
pub(crate) fn four_letter_word(
    addr: SocketAddr,
    word: &str,
    timeout: Duration,
) -> Result<String, TestbedError> {
    let ctx = |what: &str| format!("ZooKeeper `{word}` to {addr}: {what}");
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|e| TestbedError::io(ctx("connect"), e))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|_| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| TestbedError::io(ctx("socket options"), e))?;
    stream
        .write_all(word.as_bytes())
        .map_err(|e| TestbedError::io(ctx("write"), e))?;
    let mut out = Vec::new();
    stream
        .read_to_end(&mut out)
        .map_err(|e| TestbedError::io(ctx("read"), e))?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

pub(super) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_buf(out, s.as_bytes());
}

pub(super) fn put_buf(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as i32).to_be_bytes());
    out.extend_from_slice(b);
}

pub(super) fn read_i32(b: &[u8], at: usize) -> Option<i32> {
    b.get(at..at + 4)
        .map(|s| i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

pub(super) fn read_buf(b: &[u8], at: usize) -> Option<Vec<u8>> {
    let n = read_i32(b, at)?;
    if n < 0 {
        return Some(Vec::new());
    }
    b.get(at + 4..at + 4 + n as usize).map(<[u8]>::to_vec)
}

pub(super) enum ZkCallError {
    Io(TestbedError),
    Code(i32),
}

impl ZkCallError {
    pub(super) fn into_testbed(self, addr: SocketAddr, path: &str) -> TestbedError {
        match self {
            ZkCallError::Io(e) => e,
            ZkCallError::Code(code) => TestbedError::protocol(
                format!("ZooKeeper request on {path} to {addr}"),
                format!("error code {code} ({})", zk_error_name(code)),
            ),
        }
    }
}

/// A minimal jute-protocol session: connect, a few requests, close.
pub(super) struct ZkSession {
    stream: TcpStream,
    addr: SocketAddr,
    xid: i32,
}

impl ZkSession {
    pub(super) fn connect(addr: SocketAddr) -> Result<ZkSession, TestbedError> {
        let ctx = |what: &str| format!("ZooKeeper session to {addr}: {what}");
        let stream = TcpStream::connect_timeout(&addr, REQUEST_TIMEOUT)
            .map_err(|e| TestbedError::io(ctx("connect"), e))?;
        stream
            .set_read_timeout(Some(REQUEST_TIMEOUT))
            .and_then(|_| stream.set_write_timeout(Some(REQUEST_TIMEOUT)))
            .and_then(|_| stream.set_nodelay(true))
            .map_err(|e| TestbedError::io(ctx("socket options"), e))?;
        let mut s = ZkSession {
            stream,
            addr,
            xid: 0,
        };
        let mut req = Vec::new();
        req.extend_from_slice(&0i32.to_be_bytes()); // protocol version
        req.extend_from_slice(&0i64.to_be_bytes()); // last zxid seen
        req.extend_from_slice(&4000i32.to_be_bytes()); // session timeout ms
        req.extend_from_slice(&0i64.to_be_bytes()); // session id
        put_buf(&mut req, &[0; 16]); // password
        req.push(0); // not read-only
        s.send(&req)
            .map_err(|e| TestbedError::io(ctx("connect request"), e))?;
        let reply = s
            .recv()
            .map_err(|e| TestbedError::io(ctx("connect reply"), e))?;
        let timeout = read_i32(&reply, 4).unwrap_or(0);
        if timeout <= 0 {
            return Err(TestbedError::protocol(ctx("connect"), "session refused"));
        }
        Ok(s)
    }

    pub(super) fn send(&mut self, payload: &[u8]) -> std::io::Result<()> {
        let mut frame = (payload.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(payload);
        self.stream.write_all(&frame)
    }

    pub(super) fn recv(&mut self) -> std::io::Result<Vec<u8>> {
        let mut len = [0; 4];
        self.stream.read_exact(&mut len)?;
        let n = i32::from_be_bytes(len);
        if !(0..=16 << 20).contains(&n) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("bad frame length {n}"),
            ));
        }
        let mut buf = vec![0; n as usize];
        self.stream.read_exact(&mut buf)?;
        Ok(buf)
    }

    /// One request; the reply body after the header, or the error code.
    pub(super) fn call(
        &mut self,
        op: i32,
        body: &[u8],
        what: &str,
    ) -> Result<Vec<u8>, ZkCallError> {
        self.xid += 1;
        let mut req = self.xid.to_be_bytes().to_vec();
        req.extend_from_slice(&op.to_be_bytes());
        req.extend_from_slice(body);
        let addr = self.addr;
        let io = |e| ZkCallError::Io(TestbedError::io(format!("ZooKeeper {what} on {addr}"), e));
        self.send(&req).map_err(io)?;
        loop {
            let reply = self.recv().map_err(io)?;
            let xid = read_i32(&reply, 0).unwrap_or(0);
            if xid != self.xid {
                continue; // a notification or ping answer
            }
            let err = read_i32(&reply, 12).unwrap_or(-1);
            if err != 0 {
                return Err(ZkCallError::Code(err));
            }
            return Ok(reply.get(16..).unwrap_or(&[]).to_vec());
        }
    }

    pub(super) fn close(mut self) {
        let _ = self.call(-11, &[], "closeSession");
    }
}

impl From<ZkCallError> for TestbedError {
    fn from(e: ZkCallError) -> TestbedError {
        match e {
            ZkCallError::Io(e) => e,
            ZkCallError::Code(code) => TestbedError::protocol(
                "ZooKeeper request",
                format!("error code {code} ({})", zk_error_name(code)),
            ),
        }
    }
}

pub(super) fn zk_error_name(code: i32) -> &'static str {
    match code {
        -4 => "ConnectionLoss",
        -7 => "OperationTimeout",
        -8 => "BadArguments",
        -101 => "NoNode",
        -102 => "NoAuth",
        -103 => "BadVersion",
        -108 => "NoChildrenForEphemerals",
        -110 => "NodeExists",
        -111 => "NotEmpty",
        -112 => "SessionExpired",
        -118 => "SessionMoved",
        -119 => "NotReadOnly",
        _ => "see org.apache.zookeeper.KeeperException.Code",
    }
}
