//! A minimal blocking RESP2 client, so that tests can inspect a server (INFO, DEBUG, CONFIG)
//! without depending on the library under test.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A server reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK` and other simple strings.
    Status(String),
    /// An integer.
    Int(i64),
    /// A bulk string (`None` for nil).
    Bulk(Option<Vec<u8>>),
    /// An array (`None` for a nil array).
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The reply as text (bulk or status), if it is one.
    pub fn text(&self) -> Option<String> {
        match self {
            Reply::Status(s) => Some(s.clone()),
            Reply::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    /// The reply as an integer, if it is one.
    pub fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            _ => None,
        }
    }
}

/// A failed command.
#[derive(Debug)]
pub enum RespError {
    /// The server answered with an error.
    Server(String),
    /// The connection failed or the reply was malformed.
    Io(std::io::Error),
}

impl std::fmt::Display for RespError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Server(e) => write!(f, "server error: {e}"),
            Self::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RespError {}

impl From<std::io::Error> for RespError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// Sends one command on a fresh connection and reads its reply.
pub(crate) fn command(
    addr: std::net::SocketAddr,
    args: &[&str],
    timeout: Duration,
) -> Result<Reply, RespError> {
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    (&stream).write_all(&out)?;
    let mut reader = BufReader::new(stream);
    read_reply(&mut reader)
}

fn malformed(what: &str) -> RespError {
    RespError::Io(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        what.to_owned(),
    ))
}

fn read_reply(r: &mut impl BufRead) -> Result<Reply, RespError> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(malformed("connection closed"));
    }
    let line = line.trim_end_matches("\r\n");
    let (kind, rest) = line.split_at(line.len().min(1));
    let number = || rest.parse::<i64>().map_err(|_| malformed(line));
    match kind {
        "+" => Ok(Reply::Status(rest.to_owned())),
        "-" => Err(RespError::Server(rest.to_owned())),
        ":" => Ok(Reply::Int(number()?)),
        "$" => {
            let len = number()?;
            if len < 0 {
                return Ok(Reply::Bulk(None));
            }
            let mut buf = vec![0; len as usize + 2];
            r.read_exact(&mut buf)?;
            buf.truncate(len as usize);
            Ok(Reply::Bulk(Some(buf)))
        }
        "*" => {
            let len = number()?;
            if len < 0 {
                return Ok(Reply::Array(None));
            }
            let items = (0..len).map(|_| read_reply(r)).collect::<Result<_, _>>()?;
            Ok(Reply::Array(Some(items)))
        }
        _ => Err(malformed(line)),
    }
}
