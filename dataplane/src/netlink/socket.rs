//! A blocking netlink socket: one request at a time, its replies collected
//! up to the ACK, the DONE of a dump, or the single answer of a get.
//!
//! Blocking because a plugin call is a short-lived process with nothing else
//! to do while the kernel works: a plain send and receive is two system
//! calls per request where an async reactor needs several, and there is no
//! runtime to build at start-up. Both the route handles ([`super::Netlink`])
//! and the `vdpa` generic-netlink handle speak through it.

use std::fmt::Display;
use std::sync::Mutex;

use std::time::Duration;

// NLM_F_CAPPED and NLM_F_ACK_TLVS are header flags of an NLMSG_ERROR message.
use rtnetlink::packet_core::{
    NetlinkDeserializable, NetlinkMessage, NetlinkPayload, NetlinkSerializable, NLM_F_ACK,
    NLM_F_ACK_TLVS, NLM_F_CAPPED, NLM_F_MULTIPART,
};
use rtnetlink::sys::{Socket, SocketAddr};

use crate::error::{Errno, Error, Result};

/// Upper bound on one request/response exchange with the kernel. Generous:
/// deleting a link waits for an RCU grace period, which can take tens of
/// milliseconds on a busy node.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The extended-ACK attribute that carries the kernel's message
/// (linux/netlink.h).
const NLMSGERR_ATTR_MSG: u16 = 1;

/// Room for the largest datagram the kernel sends: a dump's are at most
/// 32 KiB, a single answer (a PF with many VFs) can be larger. Only the
/// pages a reply fills are ever touched ([`ReceiveBuffer`]).
const RECEIVE_BUFFER: usize = 1 << 20;

/// Length of `struct nlmsghdr`.
const HEADER_LEN: usize = 16;

pub(crate) struct NetlinkSocket {
    socket: Socket,
    /// Held for a whole exchange, so every reply read belongs to the request
    /// in flight.
    state: Mutex<State>,
}

struct State {
    seq: u32,
    buffer: ReceiveBuffer,
}

/// [`RECEIVE_BUFFER`] bytes of anonymous memory mapped for one socket and
/// unmapped with it: never a block of the heap.
///
/// The daemon holds a socket per namespace per call, several calls at
/// once, and a freed megabyte of the allocator's heap is carved up by small
/// allocations that touch its pages and keep them: the daemon's RSS held a
/// megabyte for the most sockets ever open at once, one more at each rarer
/// coincidence (issue 47's soak grew in 1 MiB steps, 8 to 10 buffers live).
/// A mapping costs only the pages replies touch, and gives them back when
/// the socket closes.
struct ReceiveBuffer(memmap2::MmapMut);

impl ReceiveBuffer {
    fn map() -> std::io::Result<ReceiveBuffer> {
        memmap2::MmapOptions::new()
            .len(RECEIVE_BUFFER)
            .map_anon()
            .map(ReceiveBuffer)
    }

    fn bytes(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl NetlinkSocket {
    /// A socket of `protocol` in the calling thread's namespace, with
    /// extended ACKs (the kernel explains its errors), capped ACKs (it does
    /// not copy our request into every error) and a receive timeout of
    /// [`REQUEST_TIMEOUT`], which bounds every exchange.
    pub fn open(protocol: isize, label: impl Display) -> Result<NetlinkSocket> {
        let fail = |what: &str, e: std::io::Error| Error::Netlink {
            op: "open netlink socket in",
            object: label.to_string(),
            reason: format!("{what}: {e}"),
        };
        // The kernel's refusal keeps its errno: EPROTONOSUPPORT says the
        // protocol's subsystem is not there (no RDMA, say).
        let mut socket = Socket::new(protocol).map_err(|e| Error::Kernel {
            op: "open netlink socket in",
            object: label.to_string(),
            errno: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            message: None,
        })?;
        socket.bind_auto().map_err(|e| fail("bind", e))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(|e| fail("connect", e))?;
        socket
            .set_ext_ack(true)
            .map_err(|e| fail("NETLINK_EXT_ACK", e))?;
        socket
            .set_cap_ack(true)
            .map_err(|e| fail("NETLINK_CAP_ACK", e))?;
        crate::probe::set_receive_timeout(&socket, REQUEST_TIMEOUT)
            .map_err(|e| fail("SO_RCVTIMEO", e))?;
        let buffer = ReceiveBuffer::map().map_err(|e| fail("receive buffer", e))?;
        Ok(NetlinkSocket {
            socket,
            state: Mutex::new(State { seq: 0, buffer }),
        })
    }

    /// Sends `msg` (its flags set by the caller) and collects the payloads
    /// of the replies. A NACK becomes [`Error::Kernel`] naming `op` and
    /// `object`, with the kernel's extended-ACK text when it sent one.
    pub fn exchange<M>(
        &self,
        msg: NetlinkMessage<M>,
        op: &'static str,
        object: &dyn Display,
    ) -> Result<Vec<M>>
    where
        M: NetlinkSerializable + NetlinkDeserializable,
    {
        self.exchange_after(Vec::new(), msg, op, object)
    }

    /// Sends `batch` in one datagram, then `msg` as [`Self::exchange`]
    /// does, and collects `msg`'s replies. The kernel answers a batch
    /// message only when it fails, and has answered all of them before it
    /// reads `msg`: so `msg` is the batch's sentinel, and a NACK of any
    /// batch message before its reply is the batch's failure (nfnetlink
    /// reports the failing message, and has applied none of the batch).
    pub fn exchange_after<M>(
        &self,
        batch: Vec<NetlinkMessage<M>>,
        mut msg: NetlinkMessage<M>,
        op: &'static str,
        object: &dyn Display,
    ) -> Result<Vec<M>>
    where
        M: NetlinkSerializable + NetlinkDeserializable,
    {
        let proto = |reason: String| Error::Netlink {
            op,
            object: object.to_string(),
            reason,
        };
        let io = |action: &str, e: std::io::Error| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                proto(format!("no reply within {REQUEST_TIMEOUT:?}"))
            }
            _ => Error::Kernel {
                op,
                object: format!("{object} ({action} the netlink socket)"),
                errno: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
                message: None,
            },
        };
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let first = state.seq.wrapping_add(1);
        if !batch.is_empty() {
            let mut request = Vec::new();
            for mut part in batch {
                state.seq = state.seq.wrapping_add(1);
                part.header.sequence_number = state.seq;
                part.finalize();
                let at = request.len();
                request.resize(at + part.buffer_len(), 0);
                part.serialize(&mut request[at..]);
            }
            retry_interrupted(|| self.socket.send(&request, 0)).map_err(|e| io("send to", e))?;
        }
        state.seq = state.seq.wrapping_add(1);
        let seq = state.seq;
        let in_batch = |s: u32| s.wrapping_sub(first) < seq.wrapping_sub(first);
        msg.header.sequence_number = seq;
        msg.finalize();
        let mut request = vec![0u8; msg.buffer_len()];
        msg.serialize(&mut request);
        retry_interrupted(|| self.socket.send(&request, 0)).map_err(|e| io("send to", e))?;

        // Without an ACK asked for, a get is answered by one message.
        let acked = msg.header.flags & NLM_F_ACK != 0;
        let buffer = state.buffer.bytes();
        let mut replies = Vec::new();
        loop {
            let n = retry_interrupted(|| self.socket.recv(&mut &mut buffer[..], libc::MSG_TRUNC))
                .map_err(|e| io("receive from", e))?;
            if n > buffer.len() {
                return Err(proto(format!(
                    "a reply of {n} bytes, more than the {RECEIVE_BUFFER}-byte buffer"
                )));
            }
            let mut at = 0;
            while at + HEADER_LEN <= n {
                let len = u32::from_ne_bytes(buffer[at..at + 4].try_into().expect("4 bytes"));
                let len = len as usize;
                if len < HEADER_LEN || at + len > n {
                    return Err(proto(format!("a reply of invalid length {len}")));
                }
                let reply = NetlinkMessage::<M>::deserialize(&buffer[at..at + len])
                    .map_err(|e| proto(format!("undecodable reply: {e}")))?;
                at += (len + 3) & !3;
                let nack = |code: std::num::NonZero<i32>, header: &[u8]| Error::Kernel {
                    op,
                    object: object.to_string(),
                    errno: Errno::from_raw(-code.get()),
                    message: extack_message(reply.header.flags, header),
                };
                if reply.header.sequence_number != seq {
                    // A batch message's NACK fails the exchange; anything
                    // else is a late answer to an exchange that timed out.
                    if let NetlinkPayload::Error(e) = &reply.payload {
                        if let Some(code) =
                            e.code.filter(|_| in_batch(reply.header.sequence_number))
                        {
                            return Err(nack(code, &e.header));
                        }
                    }
                    continue;
                }
                let multi = reply.header.flags & NLM_F_MULTIPART != 0;
                match reply.payload {
                    NetlinkPayload::InnerMessage(m) => {
                        replies.push(m);
                        if !multi && !acked {
                            return Ok(replies);
                        }
                    }
                    NetlinkPayload::Done(_) => return Ok(replies),
                    NetlinkPayload::Error(ref e) => {
                        return match e.code {
                            None => Ok(replies),
                            Some(code) => Err(nack(code, &e.header)),
                        }
                    }
                    NetlinkPayload::Overrun(_) => {
                        return Err(proto("netlink receive buffer overrun".into()))
                    }
                    _ => {}
                }
            }
        }
    }
}

fn retry_interrupted(mut call: impl FnMut() -> std::io::Result<usize>) -> std::io::Result<usize> {
    // Bounded: EINTR needs a signal, and each wait is bounded by the timeout.
    for _ in 0..16 {
        match call() {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
    call()
}

/// The kernel's extended-ACK text (NLMSGERR_ATTR_MSG) from the payload of an
/// NLMSG_ERROR that follows the error code: the original request's header
/// (whole request unless capped), then attributes.
fn extack_message(flags: u16, payload: &[u8]) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 || payload.len() < 16 {
        return None;
    }
    let mut off = if flags & NLM_F_CAPPED != 0 {
        16
    } else {
        let len = u32::from_ne_bytes(payload[0..4].try_into().ok()?) as usize;
        len.checked_add(3)? & !3
    };
    // Bounded by the payload length: every iteration advances by >= 4.
    while off + 4 <= payload.len() {
        let len = u16::from_ne_bytes([payload[off], payload[off + 1]]) as usize;
        let kind = u16::from_ne_bytes([payload[off + 2], payload[off + 3]]) & 0x3fff;
        if len < 4 || off + len > payload.len() {
            return None;
        }
        if kind == NLMSGERR_ATTR_MSG {
            let value = &payload[off + 4..off + len];
            let text = value.split(|b| *b == 0).next().unwrap_or_default();
            return Some(String::from_utf8_lossy(text).into_owned()).filter(|s| !s.is_empty());
        }
        off += (len + 3) & !3;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
        let len = 4 + value.len();
        let mut v = Vec::new();
        v.extend_from_slice(&(len as u16).to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(value);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    #[test]
    fn extack_message_from_capped_error() {
        let mut p = vec![0u8; 16];
        p.extend(attr(2, &7u32.to_ne_bytes())); // NLMSGERR_ATTR_OFFS, skipped
        p.extend(attr(1, b"Unknown device type\0"));
        assert_eq!(
            extack_message(NLM_F_CAPPED | NLM_F_ACK_TLVS, &p).as_deref(),
            Some("Unknown device type")
        );
        assert_eq!(extack_message(NLM_F_CAPPED, &p), None, "no TLV flag");
    }

    #[test]
    fn extack_message_from_uncapped_error() {
        let mut p = vec![0u8; 24];
        p[0..4].copy_from_slice(&24u32.to_ne_bytes());
        p.extend(attr(1, b"bad\0"));
        assert_eq!(extack_message(NLM_F_ACK_TLVS, &p).as_deref(), Some("bad"));
    }

    #[test]
    fn extack_message_tolerates_garbage() {
        let mut p = vec![0u8; 16];
        p.extend_from_slice(&[0xff, 0xff, 1, 0]);
        assert_eq!(extack_message(NLM_F_CAPPED | NLM_F_ACK_TLVS, &p), None);
        assert_eq!(extack_message(NLM_F_CAPPED | NLM_F_ACK_TLVS, &[1, 2]), None);
        let mut p = vec![0u8; 16];
        p[0..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(extack_message(NLM_F_ACK_TLVS, &p), None);
    }
}
