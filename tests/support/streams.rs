//! Connect: stream clients of KubeVirt's subresources (counting their requests), and what
//! speaks to a desktop through them: an RFB client, an RDP connection request, the app's
//! console websocket, the guest's echo service.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kube::Client;
use kube::client::ClientBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::sandbox;

/// A client for streams acting as `user` (no automatic retries), counting the requests to
/// KubeVirt's subresources whose path contains `/vnc`, `/portforward` or `/usbredir`.
pub async fn counting_stream_client(user: &str, counter: Arc<AtomicUsize>) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&sandbox().kubeconfig).unwrap();
    let options = kube::config::KubeConfigOptions {
        context: Some(user.into()),
        ..Default::default()
    };
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap();
    config.default_retry = false;
    let layer = tower::ServiceBuilder::new().map_request(
        move |request: http::Request<kube::client::Body>| {
            let path = request.uri().path();
            if path.contains("/vnc") || path.contains("/portforward") || path.contains("/usbredir")
            {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            request
        },
    );
    ClientBuilder::try_from(config)
        .unwrap()
        .with_layer(&layer)
        .build()
}

/// A client for streams acting as `user` (no automatic retries).
pub async fn streams_as(user: &str) -> Client {
    counting_stream_client(user, Arc::default()).await
}

/// The RFB handshake as a client (RFB 3.8, security None, shared); returns the framebuffer
/// size from ServerInit. Panics when it fails (see [`try_rfb_handshake`]).
pub async fn rfb_handshake(tcp: &mut TcpStream) -> (u16, u16) {
    try_rfb_handshake(tcp)
        .await
        .unwrap_or_else(|e| panic!("the RFB handshake: {e:#}"))
}

/// [`rfb_handshake`], failing instead of panicking: for a viewer that may be refused (the
/// stream closed, or another answer than RFB 3.8 with security None) and tries again.
pub async fn try_rfb_handshake(tcp: &mut TcpStream) -> anyhow::Result<(u16, u16)> {
    let mut version = [0u8; 12];
    tcp.read_exact(&mut version).await?;
    anyhow::ensure!(&version == b"RFB 003.008\n", "RFB version {version:?}");
    tcp.write_all(b"RFB 003.008\n").await?;
    let count = tcp.read_u8().await?;
    let mut types = vec![0u8; usize::from(count)];
    tcp.read_exact(&mut types).await?;
    anyhow::ensure!(types.contains(&1), "no security type None: {types:?}");
    tcp.write_all(&[1]).await?;
    anyhow::ensure!(tcp.read_u32().await? == 0, "SecurityResult not OK");
    tcp.write_all(&[1]).await?;
    let mut init = [0u8; 24];
    tcp.read_exact(&mut init).await?;
    let name_len = u32::from_be_bytes([init[20], init[21], init[22], init[23]]);
    let mut name = vec![0u8; name_len as usize];
    tcp.read_exact(&mut name).await?;
    Ok((
        u16::from_be_bytes([init[0], init[1]]),
        u16::from_be_bytes([init[2], init[3]]),
    ))
}

/// Asks for the whole screen and reads the FramebufferUpdate header; returns its rectangle
/// count.
pub async fn rfb_update(tcp: &mut TcpStream, width: u16, height: u16) -> u16 {
    let mut request = vec![3u8, 0, 0, 0, 0, 0];
    request.extend_from_slice(&width.to_be_bytes());
    request.extend_from_slice(&height.to_be_bytes());
    tcp.write_all(&request).await.unwrap();
    let kind = tcp.read_u8().await.unwrap();
    assert_eq!(kind, 0, "a FramebufferUpdate");
    tcp.read_u8().await.unwrap();
    tcp.read_u16().await.unwrap()
}

/// From starting `user`'s VNC forward of `member` (a viewer session of `supervisor`, as Connect
/// starts one) to the first framebuffer update a viewer gets through it; stops the forward.
///
/// Errors: the forward did not start, the viewer could not connect, the stream closed before
/// the RFB banner (virt-api refused it) or during the handshake, no update came.
pub async fn first_frame(
    supervisor: &vdi_core::session::Supervisor,
    user: &str,
    ns: &str,
    member: &str,
) -> anyhow::Result<Duration> {
    use vdi_core::session::{SessionKind, Target};
    let began = std::time::Instant::now();
    let started = supervisor
        .start_forward(
            streams_as(user).await,
            ns,
            member,
            SessionKind::Viewer,
            Target::Vnc {
                preserve_session: false,
            },
            None,
        )
        .await?;
    let mut viewer = TcpStream::connect(started.local).await?;
    // The forward opens the stream on this connection; a refused one closes it at once.
    let banner = viewer.peek(&mut [0u8; 12]).await;
    if matches!(banner, Ok(0) | Err(_)) {
        supervisor.stop(started.id);
        anyhow::bail!("the console of {member} closed before its RFB banner: {banner:?}");
    }
    // The handshake's reads panic on a stream that ends; in a task of its own that is an error.
    let rects = tokio::spawn(async move {
        let (w, h) = rfb_handshake(&mut viewer).await;
        rfb_update(&mut viewer, w, h).await
    })
    .await;
    let elapsed = began.elapsed();
    supervisor.stop(started.id);
    match rects {
        Ok(n) if n >= 1 => Ok(elapsed),
        Ok(_) => anyhow::bail!("no framebuffer update from {member}"),
        Err(e) => anyhow::bail!("the console of {member} ended during the RFB handshake: {e}"),
    }
}

/// An RDP X.224 Connection Request in its TPKT (no cookie; RDP negotiation asking for TLS or
/// CredSSP), as FreeRDP sends first.
pub const RDP_CONNECTION_REQUEST: [u8; 19] = [
    0x03, 0x00, 0x00, 0x13, 0x0e, 0xe0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x08, 0x00, 0x03,
    0x00, 0x00, 0x00,
];

/// Sends [`RDP_CONNECTION_REQUEST`] on `tcp` and asserts that an X.224 Connection Confirm
/// answers it within 10 s.
pub async fn rdp_connection_confirm(tcp: &mut TcpStream) {
    tcp.write_all(&RDP_CONNECTION_REQUEST).await.unwrap();
    let mut answer = [0u8; 11];
    tokio::time::timeout(Duration::from_secs(10), tcp.read_exact(&mut answer))
        .await
        .expect("an RDP answer within 10 s")
        .unwrap();
    assert_eq!(answer[0], 0x03, "TPKT");
    assert_eq!(answer[5] & 0xf0, 0xd0, "X.224 Connection Confirm");
}

/// The address and the secret (no slash) of a console's `ws://127.0.0.1:PORT/SECRET` URL.
pub fn console_address(url: &str) -> (std::net::SocketAddr, String) {
    url.strip_prefix("ws://")
        .and_then(|rest| rest.split_once('/'))
        .and_then(|(addr, secret)| Some((addr.parse().ok()?, secret.to_owned())))
        .unwrap_or_else(|| panic!("ws://ADDRESS/SECRET, not {url}"))
}

/// Opens the console's websocket at `url` as the app's noVNC does and asserts that the VM's
/// RFB banner comes back in a binary frame, each step within 10 s.
pub async fn assert_console_speaks_rfb(url: &str) {
    use futures::StreamExt;
    let (mut ws, _) = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::connect_async(url),
    )
    .await
    .expect("the console's handshake within 10 s")
    .unwrap();
    let frame = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .expect("a frame within 10 s")
        .expect("a frame, not the end")
        .unwrap();
    assert!(
        matches!(&frame, tokio_tungstenite::tungstenite::Message::Binary(data)
            if data.starts_with(b"RFB 003.008")),
        "the RFB banner, not {frame:?}"
    );
}

/// Asserts that a forward at `addr` to the guest's echo service (a port of
/// `sandbox.corral.dev/guest-ports` other than 22 and 3389) sends back what it is sent.
pub async fn assert_echoes(addr: std::net::SocketAddr) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"echo me").await.unwrap();
    let mut back = [0u8; 7];
    tokio::time::timeout(Duration::from_secs(10), tcp.read_exact(&mut back))
        .await
        .expect("the echo within 10 s")
        .unwrap();
    assert_eq!(&back, b"echo me");
}
