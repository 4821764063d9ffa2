//! The built programs and fixtures tests run: where cargo put them, the `corral-vdi` CLI, the
//! stand-in `usbredirect` and the recorded USB devices, and a named sandbox run by the
//! `sandbox` program.

use std::path::PathBuf;

/// `target/<profile>/`, where cargo put the test binary's parent directory and the workspace's
/// binaries.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .to_path_buf()
}

/// A named sandbox run by the `sandbox` program, as `make sandbox-up` runs one, with its state
/// in a folder of its own: a cluster a test may stop, restart or freeze without touching the
/// shared one. Dropping it stops it and removes its folder.
pub struct NamedSandbox {
    name: String,
    state: PathBuf,
}

impl NamedSandbox {
    /// One named `name` (unique among the tests running), not started yet.
    pub fn new(name: &str) -> Self {
        let state = std::env::temp_dir().join(format!(
            "corral-named-{name}-{}",
            jiff::Timestamp::now().as_nanosecond()
        ));
        std::fs::create_dir_all(&state).expect("a state folder");
        NamedSandbox {
            name: name.to_owned(),
            state,
        }
    }

    fn command(&self, verb: &str) -> std::process::Output {
        std::process::Command::new(target_dir().join("sandbox"))
            .args([verb, "--name", &self.name])
            .env("XDG_STATE_HOME", &self.state)
            .output()
            .unwrap_or_else(|e| panic!("run sandbox {verb}: {e}"))
    }

    /// Starts it; returns its kubeconfig's path.
    pub fn up(&self) -> PathBuf {
        let out = self.command("up");
        assert!(
            out.status.success(),
            "sandbox up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        PathBuf::from(stdout.lines().last().expect("a kubeconfig path").trim())
    }

    /// Stops it (its folder and kubeconfig go with it).
    pub fn down(&self) {
        let out = self.command("down");
        assert!(
            out.status.success(),
            "sandbox down: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Sends `signal` ("-STOP", "-CONT") to its kube-apiserver: stopped, the server keeps its
    /// connections open and answers nothing, as a wedged server looks from outside.
    pub fn signal_apiserver(&self, signal: &str) {
        let out = std::process::Command::new("pgrep")
            .args(["-f", &format!("kube-apiserver.*{}", self.state.display())])
            .output()
            .expect("pgrep");
        let pids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        assert!(!pids.is_empty(), "no kube-apiserver of {} found", self.name);
        for pid in pids {
            let status = std::process::Command::new("kill")
                .args([signal, &pid])
                .status()
                .expect("kill");
            assert!(status.success(), "kill {signal} {pid}");
        }
    }
}

impl Drop for NamedSandbox {
    fn drop(&mut self) {
        let _ = self.command("down");
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// The built `corral-vdi` CLI (`make test` builds the workspace, with every feature, first).
pub fn cli_binary() -> PathBuf {
    let path = target_dir().join("corral-vdi");
    assert!(
        path.exists(),
        "{} is missing: build the workspace first (cargo build --workspace --all-features)",
        path.display()
    );
    path
}

/// A directory holding only the stand-in `usbredirect` (no USB bus here), to put first on
/// PATH; see stand-ins/usbredirect.rs.
pub fn stand_in_usbredirect_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("corral-stand-in-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let target = dir.join("usbredirect");
    if !target.exists() {
        std::fs::copy(target_dir().join("usbredirect"), &target)
            .expect("the stand-in usbredirect (cargo build -p corral-tests)");
    }
    dir
}

/// The recorded USB devices of tests/fixtures/usb-devices.json (for `CORRAL_USB_FIXTURE`).
pub fn usb_fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/usb-devices.json")
}

/// Runs `cmd` to its end; its standard output.
///
/// Panics: it does not start, or exits unsuccessfully (the panic shows the command, its status
/// and its standard error).
pub fn stdout_of(cmd: &mut std::process::Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
