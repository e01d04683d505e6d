//! What the shim and the daemon say on the socket: one request, one answer,
//! each a JSON document on one line. A request is exactly what a runtime
//! gave the plugin process (its CNI variables and stdin), an answer exactly
//! what the process gives back (exit code, stdout, stderr), so a call
//! served by the daemon is indistinguishable from one run in-process.

use std::collections::BTreeMap;
use std::io::{self, BufRead, Read, Write};

use serde::{Deserialize, Serialize};

use crate::cni::skel::MAX_STDIN;

/// The largest line either side reads: the largest stdin, escaped, plus
/// the variables. Anything longer is refused, never buffered whole.
pub const MAX_LINE: u64 = 2 * MAX_STDIN + (1 << 20);

/// A CNI call as the runtime made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShimRequest {
    /// The `CNI_*` variables the runtime set.
    pub env: BTreeMap<String, String>,
    /// The network configuration, as read from stdin.
    pub stdin: String,
}

/// What the call printed, and its exit code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShimResponse {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Write `message` as one line.
pub fn send<T: Serialize>(w: &mut impl Write, message: &T) -> io::Result<()> {
    let mut line = serde_json::to_vec(message)?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()
}

/// Read one line of at most [`MAX_LINE`] bytes and decode it. End of input
/// before a whole line is `UnexpectedEof`.
pub fn receive<T: for<'de> Deserialize<'de>>(r: &mut impl BufRead) -> io::Result<T> {
    let mut line = Vec::new();
    Read::take(&mut *r, MAX_LINE + 1).read_until(b'\n', &mut line)?;
    if line.len() as u64 > MAX_LINE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("message longer than {MAX_LINE} bytes"),
        ));
    }
    if line.last() != Some(&b'\n') {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the connection closed before a whole message",
        ));
    }
    serde_json::from_slice(&line).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_and_an_answer_read_back_as_written() {
        let request = ShimRequest {
            env: [("CNI_COMMAND".to_string(), "ADD".to_string())].into(),
            stdin: "{\"cniVersion\": \"1.0.0\",\n \"name\": \"x\"}\n".into(),
        };
        let mut bytes = Vec::new();
        send(&mut bytes, &request).unwrap();
        assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), 1);
        assert_eq!(receive::<ShimRequest>(&mut &bytes[..]).unwrap(), request);

        let answer = ShimResponse {
            exit_code: 1,
            stdout: "{}".into(),
            stderr: "CNI error 7: x".into(),
        };
        let mut bytes = Vec::new();
        send(&mut bytes, &answer).unwrap();
        assert_eq!(receive::<ShimResponse>(&mut &bytes[..]).unwrap(), answer);
    }

    #[test]
    fn a_cut_message_is_end_of_input() {
        let e = receive::<ShimResponse>(&mut &b"{\"exit_code\": 0"[..]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let e = receive::<ShimResponse>(&mut &b""[..]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let e = receive::<ShimResponse>(&mut &b"[1]\n"[..]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }
}
