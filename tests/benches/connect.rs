//! Benchmark (prints figures; asserts only that what came back is what was sent): a guest port
//! through Connect's port-forward (vdi-core's forward → API server → aggregator → the sandbox's
//! virt-api `portforward` stream) against a connection straight to a local TCP echo server,
//! in one run: throughput of one connection and of 16 parallel ones (MiB/s of echoed bytes),
//! the round-trip of a 1-byte echo (p50/p95), and the time from Connect (the VNC forward
//! starting) to the first framebuffer update, for a guest whose display is not yet started
//! and for one whose display runs.
//!
//! The forwarded echo is the sandbox guest's (an echo service in the emulator, behind the real
//! kube-apiserver); the direct one is a TCP echo in this process, the same work minus the
//! forward.
//! Run: `make bench` (or `cargo bench -p corral-tests --bench connect`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use corral_tests::{first_frame, namespace, running_vm, streams_as};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use vdi_core::session::{SessionKind, Supervisor, Target};

const MIB: usize = 1 << 20;

/// A TCP echo server on 127.0.0.1; returns its address.
async fn local_echo() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let local = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut rd, mut wr) = tcp.into_split();
                let _ = tokio::io::copy(&mut rd, &mut wr).await;
            });
        }
    });
    Ok(local)
}

/// Sends `size` bytes through one connection to `to` while reading them back; checks they
/// came back unchanged (by a running sum) and returns how long it took.
async fn echo(to: SocketAddr, size: usize) -> anyhow::Result<Duration> {
    let tcp = TcpStream::connect(to).await?;
    tcp.set_nodelay(true)?;
    let began = Instant::now();
    let (mut rd, mut wr) = tcp.into_split();
    let writer = tokio::spawn(async move {
        let chunk: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
        let mut left = size;
        let mut sum = 0u64;
        while left > 0 {
            let n = left.min(chunk.len());
            wr.write_all(&chunk[..n]).await?;
            sum += chunk[..n].iter().map(|b| u64::from(*b)).sum::<u64>();
            left -= n;
        }
        anyhow::Ok((sum, wr))
    });
    let mut buf = vec![0u8; 64 * 1024];
    let (mut got, mut sum) = (0, 0u64);
    while got < size {
        let n = rd.read(&mut buf).await?;
        anyhow::ensure!(n > 0, "the echo ended after {got} of {size} bytes");
        sum += buf[..n].iter().map(|b| u64::from(*b)).sum::<u64>();
        got += n;
    }
    let elapsed = began.elapsed();
    let (sent, _wr) = writer.await??;
    anyhow::ensure!(sent == sum, "what came back differs from what was sent");
    Ok(elapsed)
}

/// MiB/s of `connections` parallel echoes of `each` bytes.
async fn throughput(to: SocketAddr, connections: usize, each: usize) -> anyhow::Result<f64> {
    let began = Instant::now();
    let rounds: Vec<_> = (0..connections)
        .map(|_| tokio::spawn(echo(to, each)))
        .collect();
    for round in rounds {
        round.await??;
    }
    Ok((connections * each) as f64 / MIB as f64 / began.elapsed().as_secs_f64())
}

/// p50 and p95 of `rounds` 1-byte echoes on one connection.
async fn latency(to: SocketAddr, rounds: usize) -> anyhow::Result<(Duration, Duration)> {
    let mut tcp = TcpStream::connect(to).await?;
    tcp.set_nodelay(true)?;
    let mut samples = Vec::with_capacity(rounds);
    let mut byte = [0u8; 1];
    for i in 0..rounds {
        let began = Instant::now();
        tcp.write_all(&[i as u8]).await?;
        tcp.read_exact(&mut byte).await?;
        samples.push(began.elapsed());
        anyhow::ensure!(byte[0] == i as u8, "echo {i} came back as {}", byte[0]);
    }
    samples.sort();
    Ok((samples[rounds / 2], samples[rounds * 95 / 100]))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let ns = namespace("bench-connect").await;
    running_vm(&ns, "echo-1", |vm| {
        vm["metadata"]["annotations"]["sandbox.corral.dev/guest-ports"] = json!("7777");
    })
    .await;
    let supervisor = Supervisor::new();
    let forward = supervisor
        .start_forward(
            streams_as("alice").await,
            &ns,
            "echo-1",
            SessionKind::Forward,
            Target::Port(7777),
            None,
        )
        .await?;
    let direct = local_echo().await?;
    let paths = [("direct", direct), ("port-forward", forward.local)];

    println!("{:<34} {:>12} {:>14}", "", "direct", "port-forward");
    let mut row = Vec::new();
    for (_, to) in paths {
        row.push(throughput(to, 1, 256 * MIB).await?);
    }
    println!(
        "{:<34} {:>8.0} MiB/s {:>10.0} MiB/s",
        "1 connection, 256 MiB each way", row[0], row[1]
    );
    let mut row = Vec::new();
    for (_, to) in paths {
        row.push(throughput(to, 16, 16 * MIB).await?);
    }
    println!(
        "{:<34} {:>8.0} MiB/s {:>10.0} MiB/s",
        "16 connections, 16 MiB each way", row[0], row[1]
    );
    let mut lat = Vec::new();
    for (_, to) in paths {
        lat.push(latency(to, 2000).await?);
    }
    println!(
        "{:<34} {:>12.2?} {:>14.2?}",
        "1-byte echo round trip, p50", lat[0].0, lat[1].0
    );
    println!(
        "{:<34} {:>12.2?} {:>14.2?}",
        "1-byte echo round trip, p95", lat[0].1, lat[1].1
    );
    println!(
        "added by the forward: p50 {:.2?}, p95 {:.2?}",
        lat[1].0.saturating_sub(lat[0].0),
        lat[1].1.saturating_sub(lat[0].1)
    );
    supervisor.stop(forward.id);

    running_vm(&ns, "desk-1", |_| {}).await;
    let cold = first_frame(&supervisor, "alice", &ns, "desk-1").await?;
    let mut warm = Vec::new();
    for _ in 0..5 {
        warm.push(first_frame(&supervisor, "alice", &ns, "desk-1").await?);
    }
    warm.sort();
    println!(
        "Connect → first framebuffer update: {cold:.0?} (guest display starting), \
         median {:.0?} of 5 (display running)",
        warm[2]
    );
    Ok(())
}
