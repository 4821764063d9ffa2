//! The session supervisor: every stream, local forward and helper process the app or the CLI
//! starts is one session here — listable, stoppable one by one, and all ended when the
//! [`Supervisor`] is dropped (the app's exit): tasks are aborted, listeners closed, helper
//! processes killed. Helpers also die with the process that started them (Linux
//! `PR_SET_PDEATHSIG`), so a crash leaves none behind.
//!
//! A forward listens on 127.0.0.1 only (an ephemeral port unless one is asked for) and opens
//! one KubeVirt stream per accepted connection, as virtctl does, so reconnecting works as
//! often as the user likes. Every listener serves only the user who started it: another
//! user's connection is closed before any stream is opened, and logged with its uid
//! ([`crate::peer`]); the USB bridge takes only its own usbredirect's. Bytes are copied both
//! ways with backpressure (a frame is sent before the next read), virt-api's pings are
//! answered, and the connection ends when either side ends.
//!
//! One file per part:
//! - `registry.rs`: the [`Supervisor`] and its sessions ([`SessionView`], [`Counters`]): list,
//!   subscribe, stop; every other part registers its sessions there and imports nothing else
//!   of this folder but `bridge.rs`;
//! - `bridge.rs`: the byte [`bridge()`] between a stream and a local reader and writer;
//! - `forward.rs`: local forwards ([`Supervisor::start_forward`]);
//! - `helper.rs`: helper processes ([`Supervisor::attach_helper`]);
//! - `console.rs`: the app's console websocket ([`Supervisor::start_console`]);
//! - `rdp.rs`: RDP in the app, an RDCleanPath proxy for IronRDP's web client
//!   ([`Supervisor::start_rdp`]);
//! - `usb_redirect.rs`: USB redirection through usbredirect ([`Supervisor::start_usb`]);
//! - `renewal.rs`: the renewal of the actor's claims while their sessions are open
//!   ([`Supervisor::renew_claims`]).
//!
//! The layering: this module uses [`crate::stream`] (the streams), [`crate::peer`] (who
//! connects), [`crate::programs`] (what to install when a helper is missing),
//! [`crate::usb`]'s device types, [`crate::rdp`]'s protocol pieces and [`crate::claim`]'s renewal (`renewal.rs`). The connect
//! flows use this module, never the reverse, and the USB module does not use it either.

mod bridge;
mod console;
mod forward;
mod helper;
mod rdp;
mod registry;
mod renewal;
mod usb_redirect;

pub use bridge::{About, bridge};
pub use console::{CONSOLE_ORIGINS, ConsoleEndpoint, HANDSHAKE_TIMEOUT};
pub use forward::{Started, Target};
pub use rdp::RdpEndpoint;
pub use registry::{Counters, SessionKind, SessionState, SessionView, Supervisor};
pub use renewal::{ClaimRenewal, RETRY};
