//! A small local client for the tests of who a listener serves: run as another Unix user
//! (through `setpriv`), it connects to an address, sends what it is given, and reads what comes
//! back until the connection ends or the wait runs out.
//!
//! `corral-test-probe HOST:PORT [SEND-HEX] [WAIT-MS]` (default: nothing sent, 3000 ms), then one
//! JSON line on stdout: `{"bytes":N,"ended":"closed"|"reset"|"timeout"|"refused","head":"…"}`,
//! `head` being the first bytes received (up to 64, as lossy UTF-8). Exits 0 whatever it saw;
//! 2 for bad arguments.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(addr) = args.first().and_then(|a| a.parse::<SocketAddr>().ok()) else {
        eprintln!("usage: corral-test-probe HOST:PORT [SEND-HEX] [WAIT-MS]");
        return ExitCode::from(2);
    };
    let send = match args.get(1).map(|h| hex(h)) {
        None => Vec::new(),
        Some(Some(bytes)) => bytes,
        Some(None) => {
            eprintln!("corral-test-probe: SEND-HEX is not hexadecimal");
            return ExitCode::from(2);
        }
    };
    let wait = Duration::from_millis(args.get(2).and_then(|w| w.parse().ok()).unwrap_or(3000));
    let (bytes, ended, head) = probe(addr, &send, wait);
    let answer = serde_json::json!({ "bytes": bytes, "ended": ended, "head": head });
    println!("{answer}");
    ExitCode::SUCCESS
}

/// Connects, sends, reads until the end or `wait`: (bytes received, how it ended, their head).
fn probe(addr: SocketAddr, send: &[u8], wait: Duration) -> (usize, &'static str, String) {
    let Ok(mut tcp) = TcpStream::connect_timeout(&addr, wait) else {
        return (0, "refused", String::new());
    };
    if !send.is_empty() && tcp.write_all(send).is_err() {
        return (0, "reset", String::new());
    }
    let deadline = Instant::now() + wait;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let ended = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break "timeout";
        }
        let _ = tcp.set_read_timeout(Some(left));
        match tcp.read(&mut buf) {
            Ok(0) => break "closed",
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                break "timeout";
            }
            Err(_) => break "reset",
        }
    };
    let head = String::from_utf8_lossy(&got[..got.len().min(64)]).into_owned();
    (got.len(), ended, head)
}

fn hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}
