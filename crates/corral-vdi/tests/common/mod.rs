//! What the CLI test files share: running the built `corral-vdi` against the test binary's
//! sandbox.

use std::process::{Command, Output};

use corral_tests::sandbox;

/// Runs `corral-vdi` with `args`, `KUBECONFIG` pointing at the sandbox.
pub fn corral(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_corral-vdi"))
        .args(args)
        .env("KUBECONFIG", &sandbox().kubeconfig)
        .env_remove("RUST_LOG")
        .output()
        .expect("run corral-vdi")
}

/// Output bytes as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
