//! Following the device list: libusb's hot-plug events where the platform has them, else a
//! re-list every second, on a thread of its own.

use super::{UsbList, current};

/// Follows the device list: libusb hot-plug events where the platform has them, else a
/// re-list every second (cheap: descriptors are cached by the kernel). Dropping the watch
/// stops it.
pub struct UsbWatch {
    rx: tokio::sync::watch::Receiver<UsbList>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl UsbWatch {
    /// Starts following (a thread of its own: libusb's event loop blocks).
    pub fn spawn() -> Self {
        use std::sync::atomic::Ordering;
        let (tx, rx) = tokio::sync::watch::channel(current());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let spawned = std::thread::Builder::new()
            .name("usb-watch".into())
            .spawn(move || {
                let hotplug = hotplug_context();
                while !stopping.load(Ordering::Relaxed) {
                    match &hotplug {
                        Some((context, _registration)) => {
                            use rusb::UsbContext;
                            let _ = context.handle_events(Some(std::time::Duration::from_secs(1)));
                        }
                        None => std::thread::sleep(std::time::Duration::from_secs(1)),
                    }
                    let next = current();
                    tx.send_if_modified(|list| {
                        let changed = *list != next;
                        if changed {
                            *list = next;
                        }
                        changed
                    });
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot follow USB devices");
        }
        UsbWatch { rx, stop }
    }

    /// A receiver of the list; `changed()` wakes on every plug and unplug.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<UsbList> {
        self.rx.clone()
    }
}

impl Drop for UsbWatch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Wakes libusb's event loop on every arrival and departure; the list is re-read after it.
struct Wake;

impl<T: rusb::UsbContext> rusb::Hotplug<T> for Wake {
    fn device_arrived(&mut self, _device: rusb::Device<T>) {}
    fn device_left(&mut self, _device: rusb::Device<T>) {}
}

type HotplugContext = (rusb::Context, rusb::Registration<rusb::Context>);

fn hotplug_context() -> Option<HotplugContext> {
    if !rusb::has_hotplug() {
        return None;
    }
    let context = rusb::Context::new().ok()?;
    let registration = rusb::HotplugBuilder::new()
        .enumerate(false)
        .register(&context, Box::new(Wake))
        .ok()?;
    Some((context, registration))
}
