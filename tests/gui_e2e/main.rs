//! End to end: the built desktop app in a real window under Xvfb, driven through WebDriver
//! (tauri-driver in front of WebKitWebDriver), against the sandbox.
//!
//! Needs the app built (`make app`), `tauri-driver` (on PATH or `$TAURI_DRIVER`), `Xvfb` and
//! `WebKitWebDriver`; `make test` provides all of them. Runs only with the `gui` feature.
//!
//! One test binary (one link, one sandbox), a module per feature; [`driver`] holds what they share.

mod broker;
mod capacity;
mod claims;
mod cluster;
mod connect;
mod driver;
mod entitlements;
mod permissions;
mod policy;
mod pool_dialogs;
mod pools;
mod rdp;
mod scale;
mod usb;
mod window;
