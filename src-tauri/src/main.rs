//! Corral VDI Console: the desktop operator console for virtual-desktop pools on KubeVirt.

#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

fn main() {
    corral_vdi_console::prepare_display();
    corral_vdi_console::run();
}
