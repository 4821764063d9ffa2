//! USB redirection: a local device, through the `usbredirect` helper and a loopback
//! connection only it may make, bridged to the VMI's `usbredir` stream (a session of kind
//! `usb`). The checks that come first are [`crate::usb::check_redirect`]'s.

use std::net::Ipv4Addr;

use kube::Client;
use tokio::net::TcpListener;

use super::bridge;
use super::registry::admitted;
use super::{SessionKind, SessionState, Supervisor};
use crate::error::{Error, Result};
use crate::stream::{self, Subresource};

impl Supervisor {
    /// Redirects a local USB device into `member` as KubeVirt's own client does: a listener on
    /// 127.0.0.1, `usbredirect --device <vid:pid> --to 127.0.0.1:PORT` (`program`), and its one
    /// connection bridged to the VMI's `usbredir` stream (a connection that is not this
    /// usbredirect's, whoever makes it, is closed at once: [`crate::peer::from_process`]). The
    /// session (kind `usb`) ends when the device goes (usbredirect exits), the desktop goes (the
    /// stream ends), or it is stopped (Detach). `spec` is how the device was named (passed to usbredirect as it is).
    /// Call [`crate::usb::check_redirect`] first.
    ///
    /// Errors: usbredirect exits before connecting — `NotFound` "device … is not present" when
    /// it says "Failed to open device" (it exits with status 0 then), else its message; the
    /// stream's refusal (409 no clientPassthrough, 503 four devices already); nothing left
    /// running in either case.
    pub async fn start_usb(
        &self,
        client: Client,
        namespace: &str,
        member: &str,
        device: &crate::usb::UsbDevice,
        spec: &crate::usb::DeviceSpec,
        program: &std::path::Path,
    ) -> Result<u32> {
        let at = format!(" at {} ", device.bus_address);
        if let Some(holder) = self.list().into_iter().find(|s| {
            s.kind == SessionKind::Usb && s.state == SessionState::Active && s.target.contains(&at)
        }) {
            return Err(Error::rejected(
                crate::error::ErrorKind::Busy,
                format!(
                    "{} ({}) is already attached to {}",
                    device.id,
                    device.describe(),
                    holder.member
                ),
                "detach it first (Sessions, or Ctrl-C in the command that attached it)",
            ));
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(|e| Error::Config(format!("listen for usbredirect on 127.0.0.1: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| Error::Config(format!("usbredirect listener address: {e}")))?;
        let id = self.register(
            namespace,
            member,
            SessionKind::Usb,
            format!(
                "usb {} at {} ({})",
                device.id,
                device.bus_address,
                device.describe()
            ),
            Some(local),
        );
        // As the user named it: vendor:product, or bus-address when two of a kind are plugged
        // in (usbredirect takes both).
        let args = vec![
            "--device".to_owned(),
            spec.argument(),
            "--to".to_owned(),
            local.to_string(),
        ];
        let pid = match self.attach_helper(id, &program.display().to_string(), &args, None) {
            Ok(pid) => pid,
            Err(e) => {
                self.end(id, "usbredirect could not start");
                return Err(e);
            }
        };
        let mut changes = self.subscribe();
        let ended = async {
            loop {
                if let Some(SessionState::Ended { reason, .. }) = self.get(id).map(|s| s.state) {
                    return reason;
                }
                if changes.changed().await.is_err() {
                    return "the supervisor stopped".to_owned();
                }
            }
        };
        let accepted = tokio::select! {
            accepted = tokio::time::timeout(std::time::Duration::from_secs(15), accept_from(&listener, id, pid)) => accepted,
            reason = ended => {
                let not_present = reason.contains("Failed to open device");
                return Err(if not_present {
                    Error::rejected(
                        crate::error::ErrorKind::NotFound,
                        format!(
                            "device {} is not present (usbredirect: Failed to open device)",
                            spec.argument()
                        ),
                        "plug it in (and check that you may open it: corral-vdi usb list), then try again",
                    )
                } else {
                    Error::rejected(
                        crate::error::ErrorKind::Other,
                        format!("usbredirect ended before connecting: {reason}"),
                        "check the device with `corral-vdi usb list`, then try again",
                    )
                });
            }
        };
        let tcp = match accepted {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(e)) => {
                self.end(id, "usbredirect could not connect");
                return Err(Error::Config(format!(
                    "accept usbredirect's connection: {e}"
                )));
            }
            Err(_) => {
                self.end(id, "usbredirect did not connect");
                return Err(Error::Config(format!(
                    "usbredirect did not connect to {local} within 15 s"
                )));
            }
        };
        let ws = match stream::open(&client, namespace, member, Subresource::UsbRedir).await {
            Ok(ws) => ws,
            Err(e) => {
                self.end(id, "the desktop refused the device");
                return Err(e);
            }
        };
        let (counters, _) = self.shared(id);
        let this = self.downgrade();
        let task = tokio::spawn(async move {
            let (rd, wr) = tcp.into_split();
            bridge(ws, rd, wr, &counters).await;
            this.end(
                id,
                "the redirection ended (the device was unplugged or the desktop stopped)",
            );
        });
        self.add_task(id, task);
        Ok(id)
    }
}

/// The first connection to `listener` that process `pid` (session `id`'s helper) makes; any
/// other, another user's or another process's, is closed at once and logged.
///
/// Errors: the listener fails.
async fn accept_from(
    listener: &TcpListener,
    id: u32,
    pid: u32,
) -> std::io::Result<tokio::net::TcpStream> {
    loop {
        let (tcp, _) = listener.accept().await?;
        if admitted(id, crate::peer::from_process(&tcp, pid)) {
            return Ok(tcp);
        }
    }
}
