//! Managed pools from the client's side (CLI, app): reading a pool's `DesktopPool`
//! ([`crate::policy`]), making one ([`ops::adopt`], and with a new pool [`create::create`]) and changing it
//! ([`change::set`], [`change::resize`], and the settings dialog's [`settings::save`]), with
//! every refusal before the write.
//!
//! A module of its own above [`crate::policy`] (the types and pure rules, which the broker,
//! the views and pool delete read) and [`crate::pool`] (whose golden-VM mark and capacity
//! admission it reuses), so that neither of those depends on it.

pub mod change;
pub mod create;
pub mod ops;
pub mod owner;
pub mod settings;
