//! Build script: Tauri code generation (config, capabilities, icons).

fn main() {
    tauri_build::build();
}
