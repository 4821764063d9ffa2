//! RDP in the app's proxy ([`Supervisor::start_rdp`]) against the sandbox's real RDP server,
//! speaking RDCleanPath as IronRDP's web client does: the probe first (a closed port refused
//! at once, nothing left), then a wrong token and a foreign origin refused without reaching the
//! guest, then the token's one connection answered with the guest's X.224 Confirm and the very
//! certificate the probe pinned.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use corral_tests::{RDP_CONNECTION_REQUEST, counting_stream_client, namespace, running_vm};
use futures::{SinkExt, StreamExt};
use ironrdp_rdcleanpath::{RDCleanPath, RDCleanPathPdu};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use vdi_core::session::{SessionKind, SessionState, Supervisor};

/// Sends one RDCleanPath request on a new websocket to `url` and returns the PDU answered.
async fn exchange(url: &str, token: &str) -> RDCleanPathPdu {
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let request = RDCleanPathPdu::new_request(
        RDP_CONNECTION_REQUEST.to_vec(),
        "member:3389".into(),
        token.into(),
        None,
    )
    .unwrap()
    .to_der()
    .unwrap();
    ws.send(Message::Binary(request.into())).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(20), ws.next())
        .await
        .expect("an answer within 20 s")
        .expect("a message")
        .unwrap();
    let Message::Binary(bytes) = answer else {
        panic!("a binary answer, not {answer:?}");
    };
    RDCleanPathPdu::from_der(&bytes).unwrap()
}

#[tokio::test]
async fn rdp_in_the_app_pins_the_probed_certificate_and_serves_one_token() {
    let ns = namespace("rdpapp").await;
    running_vm(&ns, "win-1", |_| {}).await;
    running_vm(&ns, "shut-1", |vm| {
        vm["metadata"]["annotations"]["sandbox.corral.dev/guest-ports"] = json!("22");
    })
    .await;
    let streams = Arc::new(AtomicUsize::new(0));
    let alice = counting_stream_client("alice", streams.clone()).await;
    let supervisor = Supervisor::new();

    // A guest without an RDP server: refused at once, naming it; no session, nothing listens.
    let refused = supervisor
        .start_rdp(alice.clone(), &ns, "shut-1")
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("shut-1"), "{refused}");
    assert!(supervisor.list().is_empty(), "no session for a refusal");

    // The probe: NLA, and the certificate's fingerprint.
    let endpoint = supervisor
        .start_rdp(alice.clone(), &ns, "win-1")
        .await
        .unwrap();
    assert!(endpoint.probe.nla, "the sandbox's guest wants NLA");
    assert_eq!(endpoint.probe.fingerprint.len(), 95, "{endpoint:?}");
    assert_eq!(endpoint.destination, "win-1:3389");
    let view = supervisor.get(endpoint.id).unwrap();
    assert_eq!(
        (view.kind, view.target.as_str()),
        (SessionKind::RdpInApp, "port 3389")
    );
    let after_probe = streams.load(Ordering::Relaxed);

    // A page of another origin cannot even open the websocket.
    let mut foreign = endpoint.url.as_str().into_client_request().unwrap();
    foreign
        .headers_mut()
        .insert("Origin", "https://evil.example".parse().unwrap());
    let refused = tokio_tungstenite::connect_async(foreign).await.unwrap_err();
    assert!(refused.to_string().contains("403"), "{refused}");

    // A wrong token gets HTTP 403 in RDCleanPath and no stream; the session waits on.
    let pdu = exchange(&endpoint.url, "not-the-token").await;
    assert_eq!(pdu.error.unwrap().http_status_code, Some(403));
    assert_eq!(
        streams.load(Ordering::Relaxed),
        after_probe,
        "no stream for a wrong token"
    );
    let view = supervisor.get(endpoint.id).unwrap();
    assert_eq!(view.state, SessionState::Active);
    assert!(
        view.last_error
            .unwrap()
            .contains("wrong or already used token")
    );

    // The token: the guest's Confirm and the certificate the probe pinned.
    let pdu = exchange(&endpoint.url, &endpoint.token).await;
    let Ok(RDCleanPath::Response {
        x224_connection_response,
        server_cert_chain,
        ..
    }) = pdu.into_enum()
    else {
        panic!("an RDCleanPath response");
    };
    let confirm = x224_connection_response.as_bytes();
    assert_eq!(
        (confirm[0], confirm[5] & 0xF0),
        (3, 0xD0),
        "an X.224 Confirm"
    );
    let leaf = server_cert_chain[0].as_bytes();
    assert_eq!(vdi_core::rdp::fingerprint(leaf), endpoint.probe.fingerprint);
    assert_eq!(
        streams.load(Ordering::Relaxed),
        after_probe + 1,
        "one stream for the connection"
    );

    // That connection was the session's only one: it ends with it, and nothing listens.
    corral_tests::eventually("the session's end", Duration::from_secs(20), || async {
        matches!(
            supervisor.get(endpoint.id)?.state,
            SessionState::Ended { .. }
        )
        .then_some(())
    })
    .await;
    let again = tokio_tungstenite::connect_async(endpoint.url.as_str()).await;
    assert!(
        again.is_err(),
        "the listener is closed once the session ended"
    );
}
