//! Running a Tauri app in a real window under Xvfb, driven through WebDriver (tauri-driver in
//! front of WebKitWebDriver): shared by the GUI end-to-end tests and the start-up benchmark.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;

/// Kills a child process when dropped (SIGTERM first: tauri-driver must stop its
/// WebKitWebDriver, which a SIGKILL would leave holding its port).
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free TCP port on loopback (free when asked: bind it soon).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts Xvfb on the first free display number from 90; returns it and its guard.
pub fn xvfb() -> (String, Guard) {
    for n in 90..140 {
        if std::path::Path::new(&format!("/tmp/.X11-unix/X{n}")).exists() {
            continue;
        }
        let display = format!(":{n}");
        let child = Command::new("Xvfb")
            .args([
                display.as_str(),
                "-screen",
                "0",
                "1440x900x24",
                "-nolisten",
                "tcp",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start Xvfb (apt-get install xvfb)");
        let guard = Guard(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::path::Path::new(&format!("/tmp/.X11-unix/X{n}")).exists() {
                return (display, guard);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("Xvfb {display} did not start");
    }
    panic!("no free X display between :90 and :139");
}

/// A WebDriver session on tauri-driver at `port` that starts `app` (retried for 30 s while
/// the driver comes up).
pub async fn webdriver(port: u16, app: &std::path::Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "tauri:options".into(),
        serde_json::json!({ "application": app }),
    );
    caps.insert("browserName".into(), serde_json::json!("wry"));
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // tauri-driver speaks plain HTTP on loopback: no TLS stack needed.
        let attempt = ClientBuilder::new(HttpConnector::new())
            .capabilities(caps.clone())
            .connect(&url)
            .await;
        match attempt {
            Ok(client) => return client,
            Err(e) if Instant::now() < deadline => {
                eprintln!("waiting for tauri-driver: {e}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => panic!("could not start a WebDriver session: {e}"),
        }
    }
}

/// Starts tauri-driver (`$TAURI_DRIVER`, else `tauri-driver` on PATH) on `port` and
/// `native_port` for X display `display`; the apps it starts get `env` too.
pub fn tauri_driver(port: u16, native_port: u16, display: &str, env: &[(&str, String)]) -> Guard {
    let driver = std::env::var("TAURI_DRIVER").unwrap_or_else(|_| "tauri-driver".into());
    Guard(
        Command::new(&driver)
            .args([
                "--port",
                &port.to_string(),
                "--native-port",
                &native_port.to_string(),
            ])
            .env("DISPLAY", display)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {driver} (cargo install tauri-driver): {e}")),
    )
}
