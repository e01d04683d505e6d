//! Reachability checks from inside a namespace, without `ping(8)`: one ICMP
//! echo over a raw socket opened in the namespace (the socket stays bound to
//! it). Needs CAP_NET_RAW, which plexus has wherever it can attach pods; the
//! unprivileged ICMP "ping socket" is off by default in a fresh namespace
//! (`net.ipv4.ping_group_range`), so it is no alternative there.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{
    recv, sendto, setsockopt, socket, sockopt, AddressFamily, MsgFlags, SockFlag, SockProtocol,
    SockType, SockaddrIn,
};
use nix::sys::time::TimeVal;

use crate::error::{Error, Result};
use crate::netns::NetNs;

const ICMP_ECHO_REPLY: u8 = 0;
const ICMP_ECHO_REQUEST: u8 = 8;
const PAYLOAD: &[u8] = b"plexus-probe";

/// Sends one ICMP echo request from `ns` to `target` and waits up to
/// `timeout` for its reply; returns the round-trip time.
pub fn icmp_echo(ns: &NetNs, target: Ipv4Addr, timeout: Duration) -> Result<Duration> {
    let fail = |op: &'static str, e: std::io::Error| Error::Probe {
        op,
        target: target.to_string(),
        netns: ns.path().to_path_buf(),
        reason: e.to_string(),
    };
    let socket = ns
        .run(raw_icmp_socket)?
        .map_err(|e| fail("open ICMP socket for", e))?;
    // The identifier the kernel sees is ours to pick on a raw socket: the
    // process ID keeps concurrent probers apart, and a count makes each
    // probe a new flow to conntrack, which tells ICMP flows apart by it
    // (never an echo of an earlier one, which a firewall would let
    // through as established).
    static PROBES: AtomicU16 = AtomicU16::new(0);
    let id =
        ((std::process::id() & 0xffff) as u16).wrapping_add(PROBES.fetch_add(1, Ordering::Relaxed));
    let seq = 1;
    let request = echo_request(id, seq);
    let addr = SockaddrIn::from(SocketAddrV4::new(target, 0));
    let start = Instant::now();
    sendto(socket.as_raw_fd(), &request, &addr, MsgFlags::empty())
        .map_err(|e| fail("send ICMP echo to", e.into()))?;
    // A raw socket sees every ICMP packet of the namespace: skip what is not
    // our reply, until the deadline.
    let deadline = start + timeout;
    let mut buf = [0u8; 1500];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Probe {
                op: "ping",
                target: target.to_string(),
                netns: ns.path().to_path_buf(),
                reason: format!("no ICMP echo reply within {timeout:?}"),
            });
        }
        set_receive_timeout(&socket, left).map_err(|e| fail("set a timeout for", e))?;
        let n = match recv(socket.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            Ok(n) => n,
            // The timeout (EAGAIN) is checked at the loop's top.
            Err(Errno::EAGAIN | Errno::EINTR) => continue,
            Err(e) => return Err(fail("receive the ICMP echo reply of", e.into())),
        };
        if is_reply_from(&buf[..n], target, id, seq) {
            return Ok(start.elapsed());
        }
    }
}

fn raw_icmp_socket() -> std::io::Result<OwnedFd> {
    Ok(socket(
        AddressFamily::Inet,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::Icmp,
    )?)
}

/// SO_RCVTIMEO on `socket` (also the vdpa generic-netlink socket's).
pub(crate) fn set_receive_timeout(socket: &impl AsFd, timeout: Duration) -> std::io::Result<()> {
    // At least a millisecond: a zero timeval means "block forever".
    let timeout = timeout.max(Duration::from_millis(1));
    Ok(setsockopt(
        socket,
        sockopt::ReceiveTimeout,
        // Field types vary by libc (musl widens them): inferred, not named.
        &TimeVal::new(timeout.as_secs() as _, timeout.subsec_micros() as _),
    )?)
}

fn echo_request(id: u16, seq: u16) -> Vec<u8> {
    let mut packet = vec![ICMP_ECHO_REQUEST, 0, 0, 0];
    packet.extend_from_slice(&id.to_be_bytes());
    packet.extend_from_slice(&seq.to_be_bytes());
    packet.extend_from_slice(PAYLOAD);
    let sum = checksum(&packet);
    packet[2..4].copy_from_slice(&sum.to_be_bytes());
    packet
}

/// A raw IPv4 socket delivers the IP header too: check the source, then the
/// ICMP type, identifier and sequence behind it.
fn is_reply_from(packet: &[u8], from: Ipv4Addr, id: u16, seq: u16) -> bool {
    let Some(&first) = packet.first() else {
        return false;
    };
    let header_len = usize::from(first & 0x0f) * 4;
    if packet.len() < header_len + 8 || header_len < 20 {
        return false;
    }
    let source = Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
    let icmp = &packet[header_len..];
    source == from
        && icmp[0] == ICMP_ECHO_REPLY
        && u16::from_be_bytes([icmp[4], icmp[5]]) == id
        && u16::from_be_bytes([icmp[6], icmp[7]]) == seq
}

/// The Internet checksum (RFC 1071).
fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_of_a_request_verifies_to_zero() {
        let packet = echo_request(0x1234, 7);
        assert_eq!(checksum(&packet), 0, "a packet with its checksum sums to 0");
        // RFC 1071's worked example: 0001 f203 f4f5 f6f7 sums to 0xddf2.
        assert_eq!(
            checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]),
            !0xddf2
        );
    }

    #[test]
    fn replies_are_matched_by_source_id_and_sequence() {
        let mut packet = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1,
        ];
        packet.extend_from_slice(&[ICMP_ECHO_REPLY, 0, 0, 0, 0x12, 0x34, 0, 7]);
        let from = Ipv4Addr::new(10, 0, 0, 2);
        assert!(is_reply_from(&packet, from, 0x1234, 7));
        assert!(!is_reply_from(&packet, from, 0x1234, 8));
        assert!(!is_reply_from(
            &packet,
            Ipv4Addr::new(10, 0, 0, 3),
            0x1234,
            7
        ));
        assert!(!is_reply_from(&packet[..24], from, 0x1234, 7), "truncated");
        packet[20] = ICMP_ECHO_REQUEST;
        assert!(!is_reply_from(&packet, from, 0x1234, 7), "our own request");
    }
}
