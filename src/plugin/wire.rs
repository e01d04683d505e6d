//! What the shim and the daemon say on the socket: one request, one answer,
//! each a JSON document on one line. A request is exactly what a runtime
//! gave the plugin process (its CNI variables and stdin), an answer exactly
//! what the process gives back (exit code, stdout, stderr), so a call
//! served by the daemon is indistinguishable from one run in-process.
//!
//! Besides the line, a request may pass one descriptor (SCM_RIGHTS, on its
//! first bytes): the pod's network namespace, opened by the shim on the
//! node, where `CNI_NETNS` is valid whatever the daemon's mounts are.

use std::collections::BTreeMap;
use std::io::{self, BufRead, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

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

/// Write `message` as one line on `stream`, passing `fd` along with its
/// first bytes.
pub fn send_with_fd<T: Serialize>(
    stream: &UnixStream,
    message: &T,
    fd: BorrowedFd<'_>,
) -> io::Result<()> {
    let mut line = serde_json::to_vec(message)?;
    line.push(b'\n');
    let fds = [fd.as_raw_fd()];
    let sent = sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(&line)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    (&mut &*stream).write_all(&line[sent..])?;
    (&mut &*stream).flush()
}

/// The most descriptors one read takes; more are a broken caller's, and the
/// read fails (the kernel closes those it could not pass).
const MAX_FDS: usize = 4;

/// One read of `socket` into `buf`, without waiting: the bytes read and the
/// descriptors passed with them (close-on-exec).
pub fn recv_with_fds(socket: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; MAX_FDS]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_DONTWAIT,
    )?;
    let mut fds = Vec::new();
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            // SAFETY: the kernel has just installed these descriptors in
            // this process for this message; nothing else refers to them.
            fds.extend(
                raw.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    Ok((msg.bytes, fds))
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
    use std::os::fd::AsFd;

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
    fn a_descriptor_passed_with_a_request_arrives_with_it() {
        let (shim, daemon) = UnixStream::pair().unwrap();
        let file = tempfile::tempfile().unwrap();
        let request = ShimRequest {
            env: BTreeMap::new(),
            stdin: "x".repeat(300_000),
        };
        let sender = std::thread::spawn(move || {
            send_with_fd(&shim, &request, file.as_fd()).unwrap();
            (request, file)
        });
        let (mut line, mut fds) = (Vec::new(), Vec::new());
        let mut buf = vec![0; 1 << 16];
        while line.last() != Some(&b'\n') {
            match recv_with_fds(daemon.as_fd(), &mut buf) {
                Ok((n, got)) => {
                    assert!(n > 0);
                    line.extend_from_slice(&buf[..n]);
                    fds.extend(got);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        let (request, file) = sender.join().unwrap();
        assert_eq!(receive::<ShimRequest>(&mut &line[..]).unwrap(), request);
        assert_eq!(fds.len(), 1);
        let inode = |fd: BorrowedFd| nix::sys::stat::fstat(fd).unwrap().st_ino;
        assert_eq!(inode(fds[0].as_fd()), inode(file.as_fd()));
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
