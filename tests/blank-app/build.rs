//! Build script: Tauri code generation.

fn main() {
    tauri_build::build();
}
