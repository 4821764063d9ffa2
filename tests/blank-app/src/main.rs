//! A blank Tauri 2 app: one window showing one static page. The start-up benchmark
//! (`tests/benches/startup.rs`) measures the console against it.

#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

fn main() {
    tauri::Builder::default()
        .run(tauri::generate_context!())
        .unwrap_or_else(|err| {
            eprintln!("the blank app could not start: {err}");
            std::process::exit(1);
        });
}
