//! A stand-in for `usbredirect` (Debian's 0.13) on machines without a USB bus: it behaves like
//! the real one on the wire and at its edges, which is what the redirection code relies on.
//!
//! - `--device <vid:pid|bus-dev> --to <host:port>` as the real tool takes them;
//! - the devices it can "open" are listed in `CORRAL_STAND_IN_DEVICES` (comma-separated
//!   `vid:pid` or `bus-dev`); any other prints "Failed to open device!" and exits with
//!   status 0, as the real one does;
//! - it connects to `--to` ("Failed to connect to the server", status 1, if it cannot), after
//!   `CORRAL_STAND_IN_CONNECT_DELAY_MS` milliseconds if set (so a test can connect first),
//!   sends a real usbredir hello (header `{u32 type = 0, u32 length = 68, u32 id = 0}`,
//!   `char version[64]`, one `u32` of capabilities, little-endian), reads the server's hello,
//!   then stays until it is killed, or exits with a message when the server closes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let (Some(device), Some(to)) = (value("--device"), value("--to")) else {
        eprintln!("Usage:\n  usbredirect [OPTION?]\n--device and --to are required");
        return ExitCode::from(1);
    };
    let present = std::env::var("CORRAL_STAND_IN_DEVICES").unwrap_or_default();
    if !present.split(',').any(|d| d.trim() == device) {
        eprintln!("Failed to open device!");
        return ExitCode::SUCCESS;
    }
    if let Some(ms) = std::env::var("CORRAL_STAND_IN_CONNECT_DELAY_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    let Ok(mut stream) = TcpStream::connect(&to) else {
        eprintln!("Failed to connect to the server");
        return ExitCode::from(1);
    };
    let mut hello = Vec::with_capacity(80);
    hello.extend_from_slice(&0u32.to_le_bytes());
    hello.extend_from_slice(&68u32.to_le_bytes());
    hello.extend_from_slice(&0u32.to_le_bytes());
    let mut version = [0u8; 64];
    let text = b"usbredir 0.13.0 (corral stand-in)";
    version[..text.len()].copy_from_slice(text);
    hello.extend_from_slice(&version);
    hello.extend_from_slice(&0x0000_00ffu32.to_le_bytes());
    if stream.write_all(&hello).is_err() {
        eprintln!("usbredirect: error writing to the server");
        return ExitCode::from(1);
    }
    let mut header = [0u8; 12];
    if stream.read_exact(&mut header).is_err() {
        eprintln!("usbredirect: the server closed the connection before its hello");
        return ExitCode::from(1);
    }
    let (kind, length) = (
        u32::from_le_bytes([header[0], header[1], header[2], header[3]]),
        u32::from_le_bytes([header[4], header[5], header[6], header[7]]),
    );
    if kind != 0 {
        eprintln!("usbredirect: expected the server's hello, got packet type {kind}");
        return ExitCode::from(1);
    }
    let mut payload = vec![0u8; length as usize];
    if stream.read_exact(&mut payload).is_err() {
        eprintln!("usbredirect: short hello from the server");
        return ExitCode::from(1);
    }
    // Attached: stay until killed, or until the server goes away.
    let mut sink = [0u8; 4096];
    loop {
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => {
                eprintln!("usbredirect: connection to the server closed");
                return ExitCode::from(1);
            }
            Ok(_) => {}
        }
    }
}
