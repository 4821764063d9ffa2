//! The events the app sends the window, each a type wrapping its payload with its name
//! ([`tauri_specta::Event`]), declared once: [`crate::bindings`] lists them for the bindings and
//! mounts them, the commands send them. Depends on no other module of the app.

/// Declares one event: a Rust type wrapping its payload (serialized as the payload itself),
/// with its name. The app sends it only through that type (`SessionsEvent(list).emit(&app)`,
/// [`tauri_specta::Event::emit`]), so a payload that is not what the bindings declare fails to
/// compile, and the name is written here once for both sides. (tauri-specta's `Event` derive
/// writes the same one `NAME` constant; this spares the extra proc-macro crate.)
macro_rules! event {
    ($(#[$doc:meta])* $event:ident($payload:ty) = $name:literal) => {
        $(#[$doc])*
        #[derive(Clone, serde::Serialize, specta::Type)]
        pub struct $event(pub $payload);

        impl tauri_specta::Event for $event {
            const NAME: &'static str = $name;
        }
    };
}

event!(
    /// The kubeconfig files changed (written, replaced, removed), once a burst of changes has
    /// settled.
    KubeconfigEvent(vdi_core::cluster::KubeconfigChanged) = "kubeconfig-changed"
);
event!(
    /// One step of a running pool create.
    CreateProgressEvent(vdi_core::pool::CreateProgress) = "pool-create-progress"
);
event!(
    /// The whole session list, on every change.
    SessionsEvent(Vec<vdi_core::session::SessionView>) = "sessions-changed"
);
event!(
    /// The local USB devices, on every plug and unplug.
    UsbEvent(vdi_core::usb::UsbList) = "usb-devices"
);
event!(
    /// The live Capacity view, now and on every change while it is watched.
    CapacityEvent(vdi_core::capacity::CapacitySnapshot) = "capacity-snapshot"
);
event!(
    /// One step of a claim the cluster's broker finishes (the wait for its grant).
    ClaimProgressEvent(vdi_core::claim::ClaimProgress) = "claim-progress"
);
event!(
    /// The cluster's broker changed (its leader, its replicas, or whether it runs).
    BrokerEvent(vdi_core::claim::cluster_half::BrokerBadge) = "broker-status"
);
