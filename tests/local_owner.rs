//! The app's local listeners serve only the user who started them: a second Unix user (made
//! by the test: it needs root, as CI has) connecting to the VNC viewer's forward, an RDP or SSH
//! forward, a plain port forward, the in-app console's websocket or RDP in the app's proxy is
//! closed at once with no byte and no stream opened (the stream client counts its requests), while the owner still
//! gets RFB, SSH, RDP, the echo and the console. The CLI's forwards are checked in
//! crates/corral-vdi/tests/cli_connect.rs, the USB bridge in usb.rs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use corral_tests::{
    OTHER_USER, assert_console_speaks_rfb, assert_echoes, assert_other_gets_nothing,
    console_address, counting_stream_client, namespace, other_user, rdp_connection_confirm,
    rfb_handshake, running_vm,
};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use vdi_core::session::{SessionKind, Supervisor, Target};

/// A websocket upgrade request for `path`, as noVNC's browser sends it (less the origin).
fn upgrade_request(addr: SocketAddr, path: &str) -> Vec<u8> {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .into_bytes()
}

#[tokio::test]
async fn the_apps_listeners_serve_only_their_owner() {
    other_user();
    let ns = namespace("owner").await;
    running_vm(&ns, "own-1", |vm| {
        vm["metadata"]["annotations"]["sandbox.corral.dev/guest-ports"] = json!("22,3389,7777");
    })
    .await;
    running_vm(&ns, "con-1", |_| {}).await;
    let streams = Arc::new(AtomicUsize::new(0));
    let alice = counting_stream_client("alice", streams.clone()).await;
    let supervisor = Supervisor::new();
    let mut forwards = Vec::new();
    for (kind, target) in [
        (
            SessionKind::Viewer,
            Target::Vnc {
                preserve_session: true,
            },
        ),
        (SessionKind::Rdp, Target::Port(3389)),
        (SessionKind::Ssh, Target::Port(22)),
        (SessionKind::Forward, Target::Port(7777)),
    ] {
        let started = supervisor
            .start_forward(alice.clone(), &ns, "own-1", kind, target, None)
            .await
            .unwrap();
        forwards.push(started);
    }
    let [viewer, rdp, ssh, echo] = forwards[..] else {
        unreachable!("four forwards")
    };
    let console = supervisor
        .start_console(alice.clone(), &ns, "con-1", true)
        .await
        .unwrap();
    let (console_at, secret) = console_address(&console.url);
    let opened = streams.load(Ordering::Relaxed);
    assert_eq!(opened, 1, "the console's first stream");
    // RDP in the app: its probe opens one stream of its own.
    let rdp_app = supervisor
        .start_rdp(alice.clone(), &ns, "own-1")
        .await
        .unwrap();
    let (rdp_app_at, rdp_secret) = console_address(&rdp_app.url);
    let opened = streams.load(Ordering::Relaxed);
    assert_eq!(opened, 2, "the console's first stream and RDP's probe");

    // The other user, with what each client sends first (even the console's secret path).
    assert_other_gets_nothing("the VNC viewer's forward", viewer.local, b"").await;
    assert_other_gets_nothing(
        "the RDP forward",
        rdp.local,
        &corral_tests::RDP_CONNECTION_REQUEST,
    )
    .await;
    assert_other_gets_nothing("the SSH forward", ssh.local, b"SSH-2.0-probe\r\n").await;
    assert_other_gets_nothing("a port forward", echo.local, b"echo me").await;
    assert_other_gets_nothing(
        "the console's websocket",
        console_at,
        &upgrade_request(console_at, &format!("/{secret}")),
    )
    .await;
    assert_other_gets_nothing(
        "RDP in the app's websocket",
        rdp_app_at,
        &upgrade_request(rdp_app_at, &format!("/{rdp_secret}")),
    )
    .await;
    assert_eq!(
        streams.load(Ordering::Relaxed),
        opened,
        "no stream was opened for {OTHER_USER}"
    );
    let view = supervisor.get(rdp_app.id).unwrap();
    assert_eq!(view.connections_total, 0, "{view:?}");
    assert_eq!(view.last_error, None, "{view:?}");
    for started in [viewer, rdp, ssh, echo] {
        let view = supervisor.get(started.id).unwrap();
        assert_eq!(view.connections_total, 0, "{view:?}");
        assert_eq!(view.last_error, None, "{view:?}");
    }

    // The owner: RFB, SSH, RDP, the echo, the console.
    let mut tcp = TcpStream::connect(viewer.local).await.unwrap();
    assert_eq!(rfb_handshake(&mut tcp).await, (1024, 768));
    let mut tcp = BufReader::new(TcpStream::connect(ssh.local).await.unwrap());
    let mut banner = String::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_line(&mut banner))
        .await
        .unwrap()
        .unwrap();
    assert!(banner.starts_with("SSH-2.0-"), "{banner:?}");
    let mut tcp = TcpStream::connect(rdp.local).await.unwrap();
    rdp_connection_confirm(&mut tcp).await;
    assert_echoes(echo.local).await;
    assert_console_speaks_rfb(&console.url).await;
    assert_eq!(
        streams.load(Ordering::Relaxed),
        opened + 4,
        "one stream per forward; the console used its first"
    );
}
