//! Real connections between network namespaces, for the policy tests: a
//! TCP and UDP [`Listener`] in one namespace, and tries from another that
//! say whether a connection got through *both ways* (a TCP handshake, a
//! UDP datagram echoed back). Sockets are made in their namespace by a
//! short-lived thread that enters it (a socket keeps the namespace it was
//! made in), so the test's own threads never move.
//!
//! Every wait is bounded: a refused try costs its timeout, nothing more.

use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use std::os::fd::{AsRawFd, OwnedFd};

use nix::sched::{setns, CloneFlags};
use nix::sys::socket::{
    self, sockopt, AddressFamily, SockFlag, SockProtocol, SockType, SockaddrStorage,
};

/// How long a try waits before it counts as refused: a dropped SYN or
/// datagram is silent, so this is the price of every refusal.
pub fn refusal_wait() -> Duration {
    crate::bound(Duration::from_millis(400))
}

/// Runs `make` on a thread inside `netns` and hands back what it made.
pub fn in_netns<T: Send>(
    netns: &Path,
    make: impl FnOnce() -> io::Result<T> + Send,
) -> io::Result<T> {
    let target = File::open(netns)?;
    std::thread::scope(|s| {
        s.spawn(|| {
            // A thread of its own: it ends in the namespace it switched to.
            setns(&target, CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
            make()
        })
        .join()
        .expect("the socket thread does not panic")
    })
}

/// TCP and UDP on one port of every address (IPv4 and IPv6) of a
/// namespace: connections are accepted and closed, datagrams echoed. Stops
/// on drop.
pub struct Listener {
    pub port: u16,
    stop: Arc<AtomicBool>,
    worker: Option<JoinHandle<()>>,
}

impl Listener {
    pub fn new(netns: &Path, port: u16) -> io::Result<Listener> {
        let any = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port);
        // `[::]` takes IPv4 too: bindv6only is 0 in a new namespace.
        let (tcp, udp) = in_netns(netns, || {
            Ok((TcpListener::bind(any)?, UdpSocket::bind(any)?))
        })?;
        // SCTP too where the kernel has it: its handshake completes in the
        // kernel on a listening socket, so nothing needs to accept.
        let sctp = in_netns(netns, || sctp_listen(any)).ok();
        tcp.set_nonblocking(true)?;
        udp.set_read_timeout(Some(Duration::from_millis(20)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let worker = std::thread::spawn(move || {
            let _sctp = sctp;
            let mut buf = [0u8; 1500];
            while !stopped.load(Ordering::Relaxed) {
                while let Ok((conn, _)) = tcp.accept() {
                    drop(conn);
                }
                if let Ok((n, from)) = udp.recv_from(&mut buf) {
                    let _ = udp.send_to(&buf[..n], from);
                }
            }
        });
        Ok(Listener {
            port,
            stop,
            worker: Some(worker),
        })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// Whether a TCP handshake from `netns` to `to` completes in time.
pub fn tcp_connects(netns: &Path, to: SocketAddr) -> bool {
    in_netns(netns, || TcpStream::connect_timeout(&to, refusal_wait())).is_ok()
}

/// Whether an SCTP association from `netns` to `to` comes up in time.
pub fn sctp_connects(netns: &Path, to: SocketAddr) -> bool {
    in_netns(netns, || {
        let socket = sctp_socket(&to)?;
        let wait = refusal_wait();
        let timeout =
            nix::sys::time::TimeVal::new(wait.as_secs() as i64, wait.subsec_micros() as i64);
        socket::setsockopt(&socket, sockopt::SendTimeout, &timeout)?;
        socket::connect(socket.as_raw_fd(), &SockaddrStorage::from(to))?;
        Ok(())
    })
    .is_ok()
}

fn sctp_socket(at: &SocketAddr) -> io::Result<OwnedFd> {
    let family = match at {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    Ok(socket::socket(
        family,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::Sctp,
    )?)
}

fn sctp_listen(at: SocketAddr) -> io::Result<OwnedFd> {
    let socket = sctp_socket(&at)?;
    socket::bind(socket.as_raw_fd(), &SockaddrStorage::from(at))?;
    socket::listen(&socket, socket::Backlog::new(64)?)?;
    Ok(socket)
}

/// Whether a datagram from `netns` to `to` comes back echoed in time.
pub fn udp_echoes(netns: &Path, to: SocketAddr) -> bool {
    let Ok(socket) = in_netns(netns, || {
        let local = match to {
            SocketAddr::V4(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
            SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
        };
        UdpSocket::bind(local)
    }) else {
        return false;
    };
    let _ = socket.set_read_timeout(Some(refusal_wait()));
    if socket.send_to(b"plexus-policy", to).is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    matches!(socket.recv_from(&mut buf), Ok((n, _)) if &buf[..n] == b"plexus-policy")
}
