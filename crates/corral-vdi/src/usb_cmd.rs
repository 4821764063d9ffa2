//! `usb list` and `usb redir`: local USB devices, and one redirected into your own running
//! desktop through KubeVirt's `usbredir` subresource and the local `usbredirect` tool.

use clap::{Args, Subcommand};
use vdi_core::cluster::KubeconfigSource;
use vdi_core::identity::Actor;
use vdi_core::session::{SessionState, Supervisor};
use vdi_core::usb::{self, DeviceSpec, UsbMark};

/// The usb subcommands.
#[derive(Subcommand)]
pub enum UsbCommand {
    /// List local USB devices (like lsusb), with smartcard / security-key marks and whether
    /// you may open each.
    List,
    /// Redirect a local USB device into your running desktop until Ctrl-C (or until the
    /// device or the desktop goes away).
    Redir(RedirArgs),
}

/// `usb redir <member> --device <vid:pid|bus-addr> [--user U] [--yes]`.
#[derive(Args)]
pub struct RedirArgs {
    /// The member (your desktop).
    pub member: String,
    /// The device: vendor:product in hex (1050:0407) or bus-address (3-7).
    #[arg(long)]
    pub device: String,
    /// Namespace (default: the context's namespace).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Asserts who you are: must equal the identity the cluster reports for your
    /// credentials (to act as someone else, use --as).
    #[arg(long)]
    pub user: Option<String>,
    /// Accept the security notice without asking.
    #[arg(long)]
    pub yes: bool,
}

fn marks_text(marks: &[UsbMark]) -> String {
    marks
        .iter()
        .map(|m| match m {
            UsbMark::Smartcard => "smartcard",
            UsbMark::SecurityKey => "security-key",
            UsbMark::SecurityKeyByVendor => "security-key?",
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn list() {
    let list = usb::current();
    if list.devices.is_empty() {
        match &list.problem {
            Some(problem) => out!("no USB devices: {problem}"),
            None => out!("no USB devices are plugged in"),
        }
        return;
    }
    let rows: Vec<[String; 6]> =
        std::iter::once(["ID", "BUS-DEV", "MARKS", "SPEED", "DEVICE", "ACCESS"].map(str::to_owned))
            .chain(list.devices.iter().map(|d| {
                [
                    d.id.clone(),
                    d.bus_address.clone(),
                    if d.marks.is_empty() {
                        "-".to_owned()
                    } else {
                        marks_text(&d.marks)
                    },
                    d.speed.to_string(),
                    d.describe(),
                    if d.access.writable {
                        "ok".to_owned()
                    } else {
                        format!("no write access to {}", d.access.node)
                    },
                ]
            }))
            .collect();
    crate::terminal::print_table(&rows, "");
    for d in list.devices.iter().filter(|d| !d.access.writable) {
        if let Some(fix) = &d.access.fix {
            err!("to use {} ({}): {fix}", d.id, d.describe());
        }
    }
}

fn confirm(member: &str, device: &str) -> bool {
    err!("Redirecting {device} into {member}.");
    err!("{}", usb::SECURITY_NOTICE);
    crate::terminal::ask_yes("Attach it? [y/N] ")
}

/// Runs a usb subcommand.
pub async fn run(
    source: &KubeconfigSource,
    context: Option<&str>,
    command: UsbCommand,
) -> vdi_core::Result<()> {
    match command {
        UsbCommand::List => {
            list();
            Ok(())
        }
        UsbCommand::Redir(args) => redir(source, context, args).await,
    }
}

async fn redir(
    source: &KubeconfigSource,
    context: Option<&str>,
    args: RedirArgs,
) -> vdi_core::Result<()> {
    let spec = DeviceSpec::parse(&args.device)?;
    if let Some(user) = &args.user {
        vdi_core::validate::identity(user)?;
    }
    vdi_core::validate::member_name(&args.member)?;
    let conn = source.connect(context).await?;
    let ns = args
        .namespace
        .clone()
        .unwrap_or_else(|| conn.default_namespace.clone());
    vdi_core::validate::namespace(&ns)?;
    let streams = conn.streams.clone();
    let actor = Actor::connect(conn.client).await?;
    actor.confirm_user(args.user.as_deref())?;
    let (device, program) = usb::check_redirect(&actor, &ns, &args.member, &spec).await?;
    let described = format!("{} ({})", device.id, device.describe());
    if args.yes {
        err!("{}", usb::SECURITY_NOTICE);
    } else if !confirm(&args.member, &described) {
        return Err(vdi_core::Error::invalid(
            "not attached: the security notice was not accepted",
            "answer y to attach, or pass --yes",
        ));
    }
    let supervisor = Supervisor::new();
    let id = supervisor
        .start_usb(streams, &ns, &args.member, &device, &spec, &program)
        .await?;
    out!("attached {described} to {} (Ctrl-C detaches)", args.member);
    let mut changes = supervisor.subscribe();
    loop {
        if let Some(SessionState::Ended { reason, .. }) = supervisor.get(id).map(|s| s.state) {
            out!("detached {described}: {reason}");
            return Ok(());
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {
                supervisor.stop(id);
                out!("detached {described}");
                return Ok(());
            }
            changed = changes.changed() => if changed.is_err() { return Ok(()) },
        }
    }
}
