//! The window's interface, listed once: every command the window may call (the invoke handler
//! the app runs) and every event it may listen to, from which the test `export_bindings` writes
//! the TypeScript the UI calls them through (`ui/src/bindings/index.ts`: a function per command
//! with its argument and result types, an `events` object, and every type they reach, with its
//! doc comment). A command renamed or dropped here, or an argument changed, fails the UI's
//! `npm run typecheck` once the bindings are regenerated; `make bindings` fails while they are
//! stale.
//!
//! tauri-specta (with specta) reads each command's signature (`#[specta::specta]` beside
//! `#[tauri::command]`) and the `specta::Type` derive of each type. Commands reject with their
//! error value as before (`ErrorHandlingMode::Throw`): `ui/src/api.ts` turns every rejection into
//! an `ErrorView`.

use tauri_specta::{Builder, ErrorHandlingMode, collect_commands, collect_events};

use crate::events::{
    BrokerEvent, CapacityEvent, ClaimProgressEvent, CreateProgressEvent, KubeconfigEvent,
    SessionsEvent, UsbEvent,
};

/// The commands and events of the window, with how the bindings report a command's error. The
/// app runs its invoke handler and mounts its events ([`Builder::mount_events`], before any
/// event is sent: sending an unmounted event panics).
pub fn builder() -> Builder<tauri::Wry> {
    Builder::new()
        .commands(collect_commands![
            crate::commands::app_info,
            crate::commands::list_contexts,
            crate::commands::connect_cluster,
            crate::commands::broker_status,
            crate::commands::permissions,
            crate::commands::assign_member,
            crate::commands::claim_desktop,
            crate::entitlements::entitled_pools,
            crate::entitlements::pool_entitlements,
            crate::entitlements::entitle_pool,
            crate::commands::unassign_member,
            crate::commands::golden_candidates,
            crate::commands::validate_new_pool,
            crate::commands::create_pool,
            crate::commands::delete_pool,
            crate::policy::pool_policy,
            crate::policy::check_pool_settings,
            crate::policy::save_pool_settings,
            crate::policy::adopt_pool,
            crate::policy::keep_desktop,
            crate::policy::history,
            crate::connect::member_paths,
            crate::connect::open_console,
            crate::rdp::open_rdp_in_app,
            crate::rdp::accept_rdp_certificate,
            crate::rdp::saved_rdp_login,
            crate::rdp::remember_rdp_login,
            crate::rdp::forget_rdp_login,
            crate::clipboard::clipboard_text,
            crate::clipboard::set_clipboard_text,
            crate::connect::open_viewer,
            crate::connect::open_rdp,
            crate::connect::save_rdp_file,
            crate::connect::validate_guest_login,
            crate::connect::open_ssh,
            crate::connect::list_sessions,
            crate::connect::stop_session,
            crate::connect::clear_ended_sessions,
            crate::usb::usb_devices,
            crate::usb::usb_redirect,
            crate::capacity::capacity_preview,
            crate::capacity::watch_capacity,
            crate::capacity::unwatch_capacity,
        ])
        .events(collect_events![
            KubeconfigEvent,
            CreateProgressEvent,
            SessionsEvent,
            UsbEvent,
            CapacityEvent,
            ClaimProgressEvent,
            BrokerEvent
        ])
        // The pools feed's first message, which the UI also keeps on its own.
        .typ::<vdi_core::watch::PoolsSnapshot>()
        .error_handling(ErrorHandlingMode::Throw)
        // The webview parses every integer serde_json writes as a JSON number: u64 counters
        // (bytes, seconds) are `number`, as they arrive (exact up to 2^53).
        .dangerously_cast_bigints_to_number()
        // One type per Rust type, as the UI has always had: the types the window sends
        // (`NewPool`, `Scope`) read the same both ways.
        .disable_serde_phases()
}

#[cfg(test)]
mod tests {
    /// Writes `ui/src/bindings/index.ts` (run by `make bindings`, which fails when the file in
    /// git differs from what this writes).
    #[test]
    fn export_bindings() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ui/src/bindings/index.ts");
        super::builder()
            .export(
                specta_typescript::Typescript::default().header(
                    "// The whole API the window sees, in one file as tauri-specta writes it (so it\n\
                     // runs past the 800 lines other files keep to): every command, event and type,\n\
                     // from the list in src-tauri/src/bindings.rs.",
                ),
                &path,
            )
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
}
