//! Who is at the other end of a local connection. Every listener the supervisor opens on
//! 127.0.0.1 (forwards, the in-app console, the USB bridge) serves only the user who started
//! it: what it serves is opened with that user's credentials, and VNC asks no password.
//!
//! On Linux the kernel says who owns each TCP socket: `/proc/net/tcp` and `/proc/net/tcp6`
//! list the sockets of this network namespace with their local and remote addresses, their
//! owner's uid (the effective uid of the process that made the socket) and their inode (Linux
//! `net/ipv4/tcp_ipv4.c` `get_tcp4_sock`, `net/ipv6/tcp_ipv6.c` `get_tcp6_sock`; the format is
//! in `Documentation/networking/proc_net_tcp.rst`), read with the `procfs` crate. For a
//! connection accepted on 127.0.0.1:L from 127.0.0.1:P, the peer's own socket is the entry
//! whose local address is 127.0.0.1:P and whose remote address is 127.0.0.1:L. [`same_user`]
//! compares its uid with this process's effective uid; [`from_process`] looks for its inode
//! among one process's open files (`/proc/PID/fd/*` → `socket:[INODE]`: the USB bridge's own
//! usbredirect). An entry of inode 0 is a socket no process holds any more (TIME_WAIT): it is
//! nobody's, and refused, as is every connection whose table cannot be read.
//!
//! What this leaves open: root, or anyone who may trace this process or read its memory, can
//! still see everything it relays; another process of the same user is that user.
//!
//! Elsewhere (macOS, Windows) no socket table is read and every local connection is accepted:
//! there, any local user can connect to a forward while it listens.

use std::fmt;
use std::net::SocketAddr;

use tokio::net::TcpStream;

/// A local connection refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The peer's address (`127.0.0.1:PORT`).
    pub peer: SocketAddr,
    /// The uid owning the peer's socket, when the kernel said.
    pub uid: Option<u32>,
    /// Why, in a sentence naming the peer.
    pub reason: String,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// Both ends of an accepted connection: (ours, the peer's).
fn ends(tcp: &TcpStream) -> Result<(SocketAddr, SocketAddr), Refused> {
    let peer = tcp.peer_addr().map_err(|e| Refused {
        peer: SocketAddr::from(([0, 0, 0, 0], 0)),
        uid: None,
        reason: format!("refused a local connection whose peer is unknown: {e}"),
    })?;
    let local = tcp.local_addr().map_err(|e| Refused {
        peer,
        uid: None,
        reason: format!("refused a connection from {peer}: our own address is unknown: {e}"),
    })?;
    Ok((local, peer))
}

/// Admits `tcp`, accepted on a loopback listener, only when the peer's socket belongs to the
/// user running this process (its effective uid). Always admits where no socket table is read
/// (see the module's doc).
///
/// Errors: [`Refused`], naming the peer and the uid owning its socket.
pub fn same_user(tcp: &TcpStream) -> Result<(), Refused> {
    let (local, peer) = ends(tcp)?;
    imp::same_user(local, peer)
}

/// Admits `tcp`, accepted on a loopback listener, only when process `pid` holds the peer's
/// socket open (the helper a listener was made for). Always admits where no socket table is
/// read (see the module's doc).
///
/// Errors: [`Refused`], naming the peer and the uid owning its socket.
pub fn from_process(tcp: &TcpStream, pid: u32) -> Result<(), Refused> {
    let (local, peer) = ends(tcp)?;
    imp::from_process(local, peer, pid)
}

#[cfg(target_os = "linux")]
mod imp {
    use std::net::SocketAddr;

    use procfs::net::TcpNetEntry;

    use super::Refused;

    /// `addr` with an IPv4-mapped IPv6 address (`::ffff:127.0.0.1`, how `/proc/net/tcp6`
    /// lists an IPv6 socket connected to an IPv4 address) as plain IPv4.
    fn canonical(addr: SocketAddr) -> SocketAddr {
        SocketAddr::new(addr.ip().to_canonical(), addr.port())
    }

    /// The peer's own socket among `entries`: local address `peer`, remote address `local`,
    /// still held by a process (inode not 0).
    pub(super) fn find(
        entries: &[TcpNetEntry],
        local: SocketAddr,
        peer: SocketAddr,
    ) -> Option<&TcpNetEntry> {
        let (local, peer) = (canonical(local), canonical(peer));
        entries.iter().find(|e| {
            e.inode != 0
                && canonical(e.local_address) == peer
                && canonical(e.remote_address) == local
        })
    }

    /// The peer's socket, from `/proc/net/tcp` then `/proc/net/tcp6` (absent without IPv6).
    fn peer_socket(local: SocketAddr, peer: SocketAddr) -> Result<TcpNetEntry, Refused> {
        let refused = |why: String| Refused {
            peer,
            uid: None,
            reason: format!("refused a connection from {peer}: {why}"),
        };
        let v4 =
            procfs::net::tcp().map_err(|e| refused(format!("cannot read /proc/net/tcp: {e}")))?;
        if let Some(entry) = find(&v4, local, peer) {
            return Ok(entry.clone());
        }
        let v6 = procfs::net::tcp6().unwrap_or_default();
        find(&v6, local, peer)
            .cloned()
            .ok_or_else(|| refused("no process holds its socket any more".to_owned()))
    }

    pub(super) fn same_user(local: SocketAddr, peer: SocketAddr) -> Result<(), Refused> {
        let entry = peer_socket(local, peer)?;
        let me = rustix::process::geteuid().as_raw();
        if entry.uid == me {
            return Ok(());
        }
        Err(Refused {
            peer,
            uid: Some(entry.uid),
            reason: format!(
                "refused a connection from {peer}: its socket belongs to uid {}, and this \
                 session serves only uid {me}, who started it",
                entry.uid
            ),
        })
    }

    pub(super) fn from_process(
        local: SocketAddr,
        peer: SocketAddr,
        pid: u32,
    ) -> Result<(), Refused> {
        let entry = peer_socket(local, peer)?;
        let holds = i32::try_from(pid)
            .ok()
            .and_then(|pid| procfs::process::Process::new(pid).ok())
            .and_then(|process| process.fd().ok())
            .is_some_and(|mut fds| {
                fds.any(|fd| {
                    fd.is_ok_and(|fd| fd.target == procfs::process::FDTarget::Socket(entry.inode))
                })
            });
        if holds {
            return Ok(());
        }
        Err(Refused {
            peer,
            uid: Some(entry.uid),
            reason: format!(
                "refused a connection from {peer} (a socket of uid {}): it is not process \
                 {pid}'s, which this listener waits for",
                entry.uid
            ),
        })
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::net::SocketAddr;

    use super::Refused;

    pub(super) fn same_user(_local: SocketAddr, _peer: SocketAddr) -> Result<(), Refused> {
        Ok(())
    }

    pub(super) fn from_process(
        _local: SocketAddr,
        _peer: SocketAddr,
        _pid: u32,
    ) -> Result<(), Refused> {
        Ok(())
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::net::{SocketAddr, TcpListener, TcpStream};

    use procfs::FromBufReadSI;
    use procfs::net::TcpNetEntries;

    use super::imp;

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        (client, accepted)
    }

    fn addrs(accepted: &TcpStream) -> (SocketAddr, SocketAddr) {
        (
            accepted.local_addr().unwrap(),
            accepted.peer_addr().unwrap(),
        )
    }

    #[test]
    fn a_connection_of_this_user_and_process_is_admitted() {
        let (_client, accepted) = pair();
        let (local, peer) = addrs(&accepted);
        imp::same_user(local, peer).unwrap();
        imp::from_process(local, peer, std::process::id()).unwrap();
    }

    #[test]
    fn another_process_and_a_closed_peer_are_refused() {
        let (client, accepted) = pair();
        let (local, peer) = addrs(&accepted);
        // Process 1 (init, or the container's first process) does not hold our client socket.
        let other = imp::from_process(local, peer, 1).unwrap_err();
        assert_eq!(other.uid, Some(rustix::process::geteuid().as_raw()));
        assert!(other.reason.contains("it is not process 1's"), "{other}");
        drop(client);
        // Closed: the client's end goes to FIN_WAIT2 (an orphan, inode 0), or is gone.
        let gone = imp::same_user(local, peer).unwrap_err();
        assert_eq!(gone.uid, None);
        assert!(
            gone.reason.contains("no process holds its socket"),
            "{gone}"
        );
    }

    /// Lines as Linux 6.1 prints them: an IPv4 socket and an IPv6 one connected to an IPv4
    /// address (::ffff:127.0.0.1), each with its peer, and a TIME_WAIT orphan (inode 0).
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0000000000000000FFFF00000100007F:A3F2 0000000000000000FFFF00000100007F:1F90 01 00000000:00000000 00:00000000 00000000  1001        0 55501 1 0000000000000000 20 4 30 10 -1
   1: 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000100007F:A3F2 01 00000000:00000000 00:00000000 00000000     0        0 55502 1 0000000000000000 20 4 30 10 -1
   2: 0000000000000000FFFF00000100007F:A3F3 0000000000000000FFFF00000100007F:1F90 06 00000000:00000000 03:00001770 00000000     0        0 0 3 0000000000000000
";

    #[test]
    fn mapped_addresses_match_and_orphans_are_nobodys() {
        let info = procfs::ExplicitSystemInfo {
            boot_time_secs: 0,
            ticks_per_second: 100,
            page_size: 4096,
            is_little_endian: true,
        };
        let entries = TcpNetEntries::from_buf_read(TCP6.as_bytes(), &info)
            .unwrap()
            .0;
        let local: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let peer = imp::find(&entries, local, "127.0.0.1:41970".parse().unwrap()).unwrap();
        assert_eq!((peer.uid, peer.inode), (1001, 55501));
        assert!(imp::find(&entries, local, "127.0.0.1:41971".parse().unwrap()).is_none());
        assert!(imp::find(&entries, local, "127.0.0.1:41972".parse().unwrap()).is_none());
    }
}
