//! What the benchmarks share: medians, release binaries, the memory of an app's whole process
//! tree, and starting an app under Xvfb through tauri-driver with the start time noted.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fantoccini::Client;

use crate::gui::{Guard, free_port, tauri_driver, webdriver, xvfb};

/// The median of `samples` (the upper one of an even count). Panics on none.
pub fn median<T: Ord + Copy>(mut samples: Vec<T>) -> T {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// The `p`-quantile (0.0 ..= 1.0) of `sorted` samples, the nearest rank. Panics on none.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// `bytes` in MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Now, in milliseconds since the Unix epoch (the clock a page's `Date.now()` reads).
pub fn epoch_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or_default()
}

/// The time from `since` (epoch milliseconds) to `at` (epoch milliseconds), never negative.
pub fn between(since: f64, at: f64) -> Duration {
    Duration::from_secs_f64(((at - since) / 1000.0).max(0.0))
}

/// The release build of `name` in the shared target directory.
fn release_binary(name: &str) -> PathBuf {
    crate::target_dir()
        .parent()
        .expect("the target directory")
        .join("release")
        .join(name)
}

/// The release builds of the blank Tauri app and of the console, in that order.
///
/// Errors: either is missing (with the command that builds both).
pub fn release_apps() -> anyhow::Result<(PathBuf, PathBuf)> {
    Ok((
        release_app("corral-blank-app")?,
        release_app("corral-vdi-console")?,
    ))
}

/// The release build of app `name` (`corral-vdi-console`, `corral-blank-app`).
///
/// Errors: it is missing (with the command that builds it).
pub fn release_app(name: &str) -> anyhow::Result<PathBuf> {
    let binary = release_binary(name);
    anyhow::ensure!(
        binary.exists(),
        "{} is missing: cargo build --release --locked -p corral-vdi-console -p corral-vdi -p corral-blank-app",
        binary.display()
    );
    Ok(binary)
}

/// Every process as (pid, parent pid, command name, resident bytes).
fn processes() -> Vec<(u32, u32, String, u64)> {
    let mut all = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return all;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().to_owned())
        };
        let name = field("Name:").unwrap_or_default();
        let ppid = field("PPid:").and_then(|v| v.parse().ok()).unwrap_or(0);
        let rss_kib: u64 = field("VmRSS:")
            .and_then(|v| v.trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
        all.push((pid, ppid, name, rss_kib * 1024));
    }
    all
}

/// Resident bytes of the process running `binary` and of all its descendants (WebKit's web
/// and network processes), by command name, sorted by name.
pub fn app_rss(binary: &Path) -> Vec<(String, u64)> {
    let all = processes();
    let root = all.iter().find(|(pid, ..)| {
        std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == binary)
    });
    let Some(&(root, ..)) = root else {
        return Vec::new();
    };
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(all.iter().filter(|p| p.1 == parent).map(|p| p.0));
        i += 1;
    }
    let mut by_name: HashMap<String, u64> = HashMap::new();
    for (pid, _, name, rss) in &all {
        if tree.contains(pid) {
            *by_name.entry(name.clone()).or_default() += rss;
        }
    }
    let mut out: Vec<_> = by_name.into_iter().collect();
    out.sort();
    out
}

/// An app started for measuring; dropping it stops the driver and the display.
pub struct Launched {
    /// The WebDriver session on the app.
    pub client: Client,
    /// When the session that starts the app was requested (epoch milliseconds).
    pub requested_ms: f64,
    data_home: PathBuf,
    _driver: Guard,
    _xvfb: Guard,
}

impl Launched {
    /// Closes the window and removes the app's data directory.
    pub async fn close(self) {
        let _ = tokio::time::timeout(Duration::from_secs(10), self.client.clone().close()).await;
        let _ = std::fs::remove_dir_all(&self.data_home);
    }

    /// Epoch milliseconds at which an element matching `css` was first seen in the page
    /// (polled every 10 ms), waiting at most `timeout`.
    ///
    /// Errors: it never appeared; WebDriver failed.
    pub async fn seen(&self, css: &str, timeout: Duration) -> anyhow::Result<f64> {
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self
                .client
                .execute(
                    "return document.querySelector(arguments[0]) ? Date.now() : null",
                    vec![serde_json::json!(css)],
                )
                .await?;
            if let Some(at) = seen.as_f64() {
                return Ok(at);
            }
            anyhow::ensure!(Instant::now() < deadline, "{css} never showed");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until the element matching `css` says `text` (within 60 s).
    ///
    /// Errors: it never did; WebDriver failed.
    pub async fn says(&self, css: &str, text: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let now = self
                .client
                .execute(
                    "return document.querySelector(arguments[0])?.textContent ?? ''",
                    vec![serde_json::json!(css)],
                )
                .await?;
            if now.as_str().is_some_and(|t| t.contains(text)) {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "{css} never said {text:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until no element matches `css` (within 30 s).
    ///
    /// Errors: one still did; WebDriver failed.
    pub async fn gone(&self, css: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let present = self
                .client
                .execute(
                    "return document.querySelector(arguments[0]) !== null",
                    vec![serde_json::json!(css)],
                )
                .await?;
            if present.as_bool() != Some(true) {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "{css} never went");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Clicks the element matching `css` as soon as it is there and takes the click (within 60 s).
///
/// Errors: it never took a click.
pub async fn click(client: &Client, css: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(e) = client.find(fantoccini::Locator::Css(css)).await
            && e.click().await.is_ok()
        {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{css} never clickable");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Clicks the input matching `css`, empties it (a prefilled value goes) and types `text`.
///
/// Errors: as [`click`]; WebDriver failed.
pub async fn type_in(client: &Client, css: &str, text: &str) -> anyhow::Result<()> {
    click(client, css).await?;
    let input = client.find(fantoccini::Locator::Css(css)).await?;
    input.clear().await?;
    input.send_keys(text).await?;
    Ok(())
}

/// Starts `binary` under a fresh Xvfb through tauri-driver, against `kubeconfig`, with a data
/// directory of its own. The driver's own start-up is not counted in `requested_ms`.
///
/// Errors: tauri-driver did not listen within 10 s.
pub async fn launch(binary: &Path, kubeconfig: &Path) -> anyhow::Result<Launched> {
    let (display, xvfb) = xvfb();
    let data_home = std::env::temp_dir().join(format!("corral-measure-{}", free_port()));
    let (port, native_port) = (free_port(), free_port());
    let driver = tauri_driver(
        port,
        native_port,
        &display,
        &[
            ("KUBECONFIG", kubeconfig.display().to_string()),
            ("XDG_DATA_HOME", data_home.display().to_string()),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        anyhow::ensure!(Instant::now() < deadline, "tauri-driver did not listen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let requested_ms = epoch_ms();
    let client = webdriver(port, binary).await;
    Ok(Launched {
        client,
        requested_ms,
        data_home,
        _driver: driver,
        _xvfb: xvfb,
    })
}

/// Clock ticks per second of the times in `/proc/<pid>/stat` (Linux's USER_HZ).
const TICKS_PER_SECOND: u64 = 100;

/// `(command name, parent pid, user + system time)` from a `/proc/<pid>/stat` (or a task's).
fn stat_times(path: &Path) -> Option<(String, u32, Duration)> {
    let stat = std::fs::read_to_string(path).ok()?;
    // "pid (comm) state ppid …": the name may hold spaces, so split after the last ')'.
    let (head, rest) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1.to_owned();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) … utime(11) stime(12).
    let ppid = fields.get(1)?.parse().ok()?;
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some((
        name,
        ppid,
        Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND),
    ))
}

/// CPU time (user + system) used so far by the parts of a benchmark run: `emulator` (this
/// process's threads of the in-process sandbox, named `sandbox*`: the KubeVirt emulation and
/// the emulated virt-api), `benchmark` (this process's other threads: the clients measured)
/// and each child process by command name (`kube-apiserver`, `etcd`). Subtract two readings
/// for what happened between them; 10 ms resolution.
pub fn cpu_time() -> BTreeMap<String, Duration> {
    let mut out = BTreeMap::new();
    let me = std::process::id();
    let total = stat_times(Path::new("/proc/self/stat")).map_or(Duration::ZERO, |t| t.2);
    let mut emulator = Duration::ZERO;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            if let Some((name, _, used)) = stat_times(&task.path().join("stat"))
                && name.starts_with("sandbox")
            {
                emulator += used;
            }
        }
    }
    out.insert("emulator".to_owned(), emulator);
    out.insert("benchmark".to_owned(), total.saturating_sub(emulator));
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            if let Some((name, ppid, used)) = stat_times(&entry.path().join("stat"))
                && ppid == me
            {
                *out.entry(name).or_default() += used;
            }
        }
    }
    out
}

/// What each part used between two [`cpu_time`] readings.
pub fn cpu_between(
    before: &BTreeMap<String, Duration>,
    after: &BTreeMap<String, Duration>,
) -> BTreeMap<String, Duration> {
    after
        .iter()
        .map(|(name, used)| {
            let earlier = before.get(name).copied().unwrap_or_default();
            (name.clone(), used.saturating_sub(earlier))
        })
        .collect()
}
