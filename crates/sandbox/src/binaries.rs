//! The real `kube-apiserver`, `kube-controller-manager` and `etcd`, built with `go build` from the Go module proxy at the
//! versions pinned in `crates/sandbox/go/go.mod`, and cached outside the repository keyed by a
//! hash of the pin. A changed pin builds new binaries; an unchanged one reuses the cache.
//!
//! On a fresh machine `scripts/install-deps.sh` starts compiling the same Go packages before
//! any Rust is built (filling Go's own build cache), holding [`GO_BUILD_LOCK`]; [`ensure`]
//! waits on that lock, so the build here then only links.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

const GO_MOD: &str = include_str!("../go/go.mod");
const GO_SUM: &str = include_str!("../go/go.sum");
const ETCD_MAIN: &str = include_str!("../go/cmd/etcd/main.go");

/// Bumped whenever [`go_build`]'s flags change, so that the cache key changes with them.
const BUILD_RECIPE: &str = "ldflags-version-stamp-1";

/// Kubernetes release of the sandbox's kube-apiserver.
pub const KUBERNETES_VERSION: &str = "v1.35.4";

/// The file, under `sandbox-bin/` in [`cache_root`], whose `flock(2)` lock is held by whoever
/// runs `go build` for the sandbox: [`ensure`] and the shell's warm-up of Go's build cache
/// (`flock(1)` in `scripts/install-deps.sh`), so that the two never compile the same packages
/// at once on a two-core machine.
pub const GO_BUILD_LOCK: &str = ".go-build.lock";

/// Paths of the server binaries.
#[derive(Clone, Debug)]
pub struct Binaries {
    /// The `kube-apiserver` binary.
    pub kube_apiserver: PathBuf,
    /// The `kube-controller-manager` binary (the sandbox runs only its ValidatingAdmissionPolicy
    /// status controller).
    pub kube_controller_manager: PathBuf,
    /// The `etcd` binary.
    pub etcd: PathBuf,
}

/// Root of Corral's caches: `$CORRAL_CACHE_DIR`, else `$XDG_CACHE_HOME/corral-vdi`, else
/// `~/.cache/corral-vdi`.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("CORRAL_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("corral-vdi")
}

/// The cache key: the first 16 hex digits of SHA-256 over the pin files.
pub fn pin_key() -> String {
    let mut hash = Sha256::new();
    for part in [GO_MOD, GO_SUM, ETCD_MAIN, BUILD_RECIPE] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    hash.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The binaries for the current pin if the cache has all of them, without building anything.
pub fn cached() -> Option<Binaries> {
    let binaries = pinned();
    (binaries.kube_apiserver.exists()
        && binaries.kube_controller_manager.exists()
        && binaries.etcd.exists())
    .then_some(binaries)
}

/// Whether another process is building the current pin's binaries now (holds the cache lock).
pub fn building() -> bool {
    let Some(dir) = pinned().etcd.parent().map(Path::to_path_buf) else {
        return false;
    };
    match File::open(dir.join(".lock")) {
        Ok(lock) => matches!(lock.try_lock(), Err(std::fs::TryLockError::WouldBlock)),
        Err(_) => false,
    }
}

/// Where the current pin's binaries are (or will be) cached.
fn pinned() -> Binaries {
    let dir = cache_root().join("sandbox-bin").join(pin_key());
    Binaries {
        kube_apiserver: dir.join("kube-apiserver"),
        kube_controller_manager: dir.join("kube-controller-manager"),
        etcd: dir.join("etcd"),
    }
}

/// Returns the binaries for the current pin, building them first if the cache lacks them.
///
/// Several processes may call this at once (parallel test binaries): a file lock makes one
/// build while the others wait, and the build waits for a warm-up of Go's build cache that
/// holds [`GO_BUILD_LOCK`]. A cold build takes several minutes on two cores.
///
/// Errors: `go` is not on PATH, or the build fails (its output is in the error).
pub fn ensure() -> Result<Binaries> {
    if let Some(binaries) = cached() {
        return Ok(binaries);
    }
    let binaries = pinned();
    let dir = binaries
        .etcd
        .parent()
        .context("the binary cache has no folder")?
        .to_path_buf();
    fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let lock = File::create(dir.join(".lock"))?;
    lock.lock().context("lock the sandbox binary cache")?;
    let go_lock = File::create(cache_root().join("sandbox-bin").join(GO_BUILD_LOCK))?;
    go_lock
        .lock()
        .context("wait for the Go build cache's warm-up (scripts/install-deps.sh)")?;
    if let Some(binaries) = cached() {
        return Ok(binaries);
    }
    let src = dir.join("src");
    fs::create_dir_all(src.join("cmd/etcd"))?;
    fs::write(src.join("go.mod"), GO_MOD)?;
    fs::write(src.join("go.sum"), GO_SUM)?;
    fs::write(src.join("cmd/etcd/main.go"), ETCD_MAIN)?;
    eprintln!(
        "sandbox: building kube-apiserver and kube-controller-manager {KUBERNETES_VERSION} and etcd with go build (once per pin; several minutes)…"
    );
    go_build(&src, "./cmd/etcd", &binaries.etcd)?;
    go_build(
        &src,
        "k8s.io/kubernetes/cmd/kube-apiserver",
        &binaries.kube_apiserver,
    )?;
    go_build(
        &src,
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        &binaries.kube_controller_manager,
    )?;
    Ok(binaries)
}

fn go_build(src: &Path, package: &str, out: &Path) -> Result<()> {
    let partial = out.with_extension("partial");
    // Stamp the release into the binary, as Kubernetes' own build does, so that /version
    // and the compatibility version are v1.35.4 rather than v0.0.0-master.
    let (major, minor) = ("1", "35");
    let ldflags = [
        "-s -w".to_owned(),
        format!("-X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION}"),
        format!("-X k8s.io/component-base/version.gitMajor={major}"),
        format!("-X k8s.io/component-base/version.gitMinor={minor}"),
        "-X k8s.io/component-base/version.gitTreeState=clean".to_owned(),
        format!("-X k8s.io/client-go/pkg/version.gitVersion={KUBERNETES_VERSION}"),
        format!("-X k8s.io/client-go/pkg/version.gitMajor={major}"),
        format!("-X k8s.io/client-go/pkg/version.gitMinor={minor}"),
    ]
    .join(" ");
    let output = Command::new("go")
        .arg("build")
        .arg(format!("-ldflags={ldflags}"))
        .arg("-o")
        .arg(&partial)
        .arg(package)
        .current_dir(src)
        .env("GOFLAGS", "-mod=mod")
        .output()
        .context("run `go build` (is Go installed and on PATH?)")?;
    if !output.status.success() {
        bail!(
            "go build {package} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    fs::rename(&partial, out)?;
    Ok(())
}
