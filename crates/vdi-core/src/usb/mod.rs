//! Local USB devices and their redirection into a desktop (SPEC "USB redirection").
//!
//! **Listing** enumerates with libusb (rusb): vendor:product, bus/address, device and interface
//! classes and speed come from the descriptors libusb reads without opening a device; the
//! manufacturer, product and serial strings, which libusb could only read by opening the
//! device (root, usually), come from sysfs (`/sys/bus/usb/devices/<bus>-<ports>/`), as does a
//! HID interface's report descriptor. A device is marked a **smartcard** when an interface has
//! class 0x0B (CCID), and a **security key** when a HID interface's report descriptor carries
//! the FIDO usage page 0xF1D0 (what systemd's `fido_id` checks), or — when that cannot be read
//! — when its vendor is a known security-key maker. Whether this user can open the device node
//! (`/dev/bus/usb/BBB/DDD`) is checked with `access(2)`, which honours the ACLs udev's
//! `uaccess` tag sets; when not, the node and the udev rule that fixes it are named.
//!
//! **Redirecting** is what KubeVirt's own client does, with no virtctl: a loopback listener,
//! `usbredirect --device <vid:pid|bus-addr> --to 127.0.0.1:PORT`, and that one connection
//! bridged to the VMI's `usbredir` subresource stream (a session of kind `usb`).
//!
//! One file per part:
//! - `classify.rs`: what one device is — its facts, its marks ([`classify()`]) and the
//!   [`UsbDevice`] shown, with its node's access and the udev fix;
//! - `spec.rs`: how a device is named ([`DeviceSpec`]: `vid:pid` or `bus-address`);
//! - `list.rs`: the device list now ([`current`], [`list_devices`]), from libusb and sysfs or a
//!   recording;
//! - `hotplug.rs`: following the list as devices come and go ([`UsbWatch`]);
//! - `redirect.rs`: the checks before a redirection ([`check_redirect`]).
//!
//! The redirection itself is a session of kind `usb`, started by the session supervisor, which
//! uses this module's device types; this module uses neither the supervisor nor the connect
//! flows (what to install when `usbredirect` is missing comes from [`crate::programs`]).

mod classify;
mod hotplug;
mod list;
mod redirect;
mod spec;

pub use classify::{
    CLASS_HID, CLASS_HUB, CLASS_SMARTCARD, DeviceFacts, FIDO_USAGE_PAGE, SECURITY_KEY_VENDORS,
    UsbAccess, UsbDevice, UsbMark, classify, declares_usage_page, device_node, device_view,
    node_writable, udev_fix,
};
pub use hotplug::UsbWatch;
pub use list::{SECURITY_NOTICE, UsbList, current, list_devices};
pub use redirect::check_redirect;
pub use spec::DeviceSpec;
