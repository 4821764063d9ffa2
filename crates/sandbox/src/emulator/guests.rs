//! Guest-side servers behind the emulated stream subresources. There is no guest OS in the
//! sandbox: what answers a VMI's console and ports are real programs on 127.0.0.1.
//!
//! | guest side | real program | started |
//! |---|---|---|
//! | screen (vnc, vnc/screenshot) | TigerVNC's `Xvnc` (`tigervnc-standalone-server`), 1024×768 (an xrdp guest's RDP client sets its own size), `-localhost -SecurityTypes None`, desktop name `<ns>/<name>`, showing a background colour derived from the VMI's name (`xsetroot`), a window naming it (`xmessage`) and, at the top left, the typing sink: an `xterm` titled [`TYPING_SINK_TITLE`] that holds the keyboard focus (`xdotool windowfocus`) and appends every character typed into it, unbuffered (`stty -icanon`, `cat`), to `<guest dir>/typed.txt`, whose path the VMI's annotation [`TYPED_TEXT_ANNOTATION`] gives | lazily, on the first vnc or screenshot request (or RDP connection) to a running VMI |
//! | TCP 3389 (RDP), by default | FreeRDP's `freerdp-shadow-cli` (`freerdp2-shadow-x11`) shadowing that VMI's Xvnc display, `/bind-address:127.0.0.1 +auth /sec:nla /sam-file:<guest dir>/rdp/sam`: NLA (CredSSP with NTLM) only, checked against the VM's credentials ([`RDP_CREDENTIALS_ANNOTATION`](super::knobs::RDP_CREDENTIALS_ANNOTATION), default [`DEFAULT_RDP_USER`](super::knobs::DEFAULT_RDP_USER) `corral` / [`DEFAULT_RDP_PASSWORD`](super::knobs::DEFAULT_RDP_PASSWORD) `corral-sandbox`), written to the SAM file ([`super::sam`]) when the display starts and again before every connection through guest port 3389, so a changed annotation applies to the next connection. Its TLS certificate is the VM's, made on the VM's first start and kept through restarts (as a guest keeps it on its disk), in `<guests root>/rdp-identities/<ns>_<name>/`. No PAM: the X11 shadow subsystem asks PAM only when the connection is not NLA. No clipboard and no dynamic resize: FreeRDP's shadow server (2.11, and 3.x alike) serves neither the cliprdr nor the display control channel | with the VMI's Xvnc |
//! | TCP 3389 (RDP) of a VM annotated [`RDP_SERVER_ANNOTATION`](super::knobs::RDP_SERVER_ANNOTATION) `"xrdp"` | xrdp (`xrdp`) in front of that VMI's Xvnc, through its VNC module ([`super::xrdp`]): TLS only, no NLA and no login, clipboard text both ways (ISO-8859-1), the screen resized to the client's size and along with its window; its certificate is the VM's, kept through restarts, in `<guests root>/rdp-identities/<ns>_<name>/xrdp-tls.pem` | with the VMI's Xvnc |
//! | TCP 22 (SSH) | one `sshd` per sandbox ([`crate::ssh`]) | with the sandbox |
//! | any other open TCP port | an echo service in the emulator | per connection |
//!
//! Which ports are open is set per VM by `sandbox.corral.dev/guest-ports` ([`super::knobs`]);
//! 5900 is always closed (VNC goes through the vnc subresource). A VMI's servers are stopped,
//! and its streams closed, when the VMI is deleted, replaced (restart) or leaves `Running`; a
//! reaper watching VMIs does it. Each VMI also has the VNC viewer slot (one viewer at a time,
//! as virt-handler keeps it) and the four usbredir slots of KubeVirt's `clientPassthrough`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use sha2::Digest;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::process::Child;
use tokio::sync::{oneshot, watch};

use super::knobs::{
    RDP_PORT_ANNOTATION, RdpServer, TYPED_TEXT_ANNOTATION, USBREDIR_ATTACHED_ANNOTATION,
    XVNC_DISPLAY_ANNOTATION, XVNC_PID_ANNOTATION, XVNC_RFB_PORT_ANNOTATION, rdp_credentials,
    rdp_server,
};
use super::sam::write_sam;
use super::types::{VirtualMachine, VirtualMachineInstance};
use crate::process::{command, free_port, log_tail, program, spawn_listening, terminate};

/// USB redirection slots per VMI (KubeVirt gives a VMI with `clientPassthrough` four).
pub const USBREDIR_SLOTS: usize = 4;
/// Screen size of every guest display.
pub const GEOMETRY: &str = "1024x768";
/// Guest port whose server is the VMI's RDP server.
pub const RDP_PORT: u16 = 3389;
/// Guest port whose server is the sandbox's sshd.
pub const SSH_PORT: u16 = 22;
/// Guest port that never answers (VNC goes through the vnc subresource).
pub const VNC_PORT: u16 = 5900;
/// Title of the typing sink window on every guest screen.
pub const TYPING_SINK_TITLE: &str = "Corral typing sink";
/// The typing sink's program (`sh -c`, `$1`: the file to append to, `$2`: xdotool): takes the
/// keyboard focus (retried while the window is not mapped yet), then appends each character as
/// it is typed. The file appears once the focus is taken (or given up on after 10 s).
const TYPING_SINK_SCRIPT: &str = r#"printf '%s\n' 'Typing sink: what is typed here is recorded.'
tries=0
until timeout 5 "$2" windowfocus --sync "$WINDOWID" 2>/dev/null; do
  tries=$((tries + 1))
  [ "$tries" -ge 100 ] && break
  sleep 0.1
done
stty -icanon -isig -ixon -iexten min 1 time 0
exec cat >>"$1"
"#;
/// Age below which a guest is not reaped (the VMI watch may lag behind the request that made it).
pub const REAP_GRACE: Duration = Duration::from_secs(3);

/// One VMI incarnation: a restarted VM gets a new VMI (new uid) and new servers.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct GuestKey {
    /// Namespace.
    pub namespace: String,
    /// VMI name (= VM name).
    pub name: String,
    /// VMI uid.
    pub uid: String,
}

impl GuestKey {
    /// The key of a VMI.
    pub fn of(vmi: &VirtualMachineInstance) -> GuestKey {
        GuestKey {
            namespace: vmi.namespace().unwrap_or_default(),
            name: vmi.name_any(),
            uid: vmi.uid().unwrap_or_default(),
        }
    }
}

/// A byte stream to a guest server.
pub trait GuestIo: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> GuestIo for T {}

/// Every guest of one sandbox.
pub struct Guests {
    client: Client,
    root: PathBuf,
    ssh_port: Option<u16>,
    map: Mutex<HashMap<GuestKey, Arc<Guest>>>,
    next_id: AtomicU64,
}

/// The servers and stream slots of one running VMI.
pub struct Guest {
    /// Which VMI.
    pub key: GuestKey,
    born: Instant,
    display: tokio::sync::OnceCell<Arc<Display>>,
    viewer: Mutex<Option<Viewer>>,
    usb: tokio::sync::Mutex<usize>,
    gone: watch::Sender<bool>,
}

/// A VMI's screen: Xvnc and its X clients, and the RDP server shadowing it.
pub struct Display {
    /// X display number (`DISPLAY=:<number>`).
    pub number: u32,
    /// Xvnc's RFB port on 127.0.0.1.
    pub rfb_port: u16,
    /// Xvnc's pid.
    pub xvnc_pid: u32,
    /// The RDP server's port on 127.0.0.1, when it runs.
    pub rdp_port: Option<u16>,
    /// The file the typing sink appends to (`<guest dir>/typed.txt`, see the module docs).
    pub typed_text: PathBuf,
    /// The shadow RDP server's SAM file (`<guest dir>/rdp/sam`); `None` with xrdp (no login).
    sam_file: Option<PathBuf>,
    /// Programs to stop, in order (RDP server, X clients, then Xvnc).
    procs: Mutex<Vec<Child>>,
}

struct Viewer {
    id: u64,
    kick: oneshot::Sender<()>,
}

/// The VNC viewer slot of a VMI, held while a vnc stream is open; dropping it frees the slot.
pub struct ViewerSlot {
    guest: Arc<Guest>,
    id: u64,
    kicked: oneshot::Receiver<()>,
}

/// One of a VMI's usbredir slots, held while a usbredir stream is open; dropping it frees the
/// slot and updates the VMI's attached count.
pub struct UsbSlot {
    guest: Arc<Guest>,
    client: Client,
}

/// Why a guest port could not be reached: the text after virt-api's `dialing VM: `.
#[derive(Debug)]
pub struct DialError(pub String);

impl Guests {
    /// The guests of a sandbox whose working files go under `root`, with guest port 22 served
    /// by the sshd on `ssh_port` (closed when `None`).
    pub fn new(client: Client, root: PathBuf, ssh_port: Option<u16>) -> Arc<Guests> {
        Arc::new(Guests {
            client,
            root,
            ssh_port,
            map: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        })
    }

    /// The guest of a VMI, registered on first use (which starts nothing).
    pub fn guest(&self, vmi: &VirtualMachineInstance) -> Arc<Guest> {
        let key = GuestKey::of(vmi);
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(key.clone())
            .or_insert_with(|| {
                Arc::new(Guest {
                    key,
                    born: Instant::now(),
                    display: tokio::sync::OnceCell::new(),
                    viewer: Mutex::new(None),
                    usb: tokio::sync::Mutex::new(0),
                    gone: watch::channel(false).0,
                })
            })
            .clone()
    }

    /// The guest's display, started on first use: Xvnc, its X clients and the RDP server. The
    /// VMI is annotated with the display's number, pid and ports.
    ///
    /// Errors: Xvnc is missing or did not start (the error says which package to install or
    /// carries Xvnc's log).
    pub async fn display(&self, guest: &Arc<Guest>) -> Result<Arc<Display>> {
        let display = guest
            .display
            .get_or_try_init(|| async {
                let dir = self.root.join(format!(
                    "{}_{}_{}",
                    guest.key.namespace,
                    guest.key.name,
                    guest.key.uid.get(..8).unwrap_or(&guest.key.uid)
                ));
                // The RDP server's certificate is the VM's, kept through restarts (as a guest
                // keeps it on its disk): its HOME is per VM, not per VMI.
                let rdp_home = self
                    .root
                    .join("rdp-identities")
                    .join(format!("{}_{}", guest.key.namespace, guest.key.name));
                let server = rdp_server(&self.vm_annotations(&guest.key).await.unwrap_or_default());
                let display = Display::start(&guest.key, &dir, &rdp_home, server).await?;
                self.write_rdp_credentials(&guest.key, &display).await;
                let mut annotations = json!({
                    XVNC_DISPLAY_ANNOTATION: format!(":{}", display.number),
                    XVNC_PID_ANNOTATION: display.xvnc_pid.to_string(),
                    XVNC_RFB_PORT_ANNOTATION: display.rfb_port.to_string(),
                    TYPED_TEXT_ANNOTATION: display.typed_text.display().to_string(),
                });
                if let Some(port) = display.rdp_port {
                    annotations[RDP_PORT_ANNOTATION] = json!(port.to_string());
                }
                annotate(&self.client, &guest.key, annotations).await;
                anyhow::Ok(Arc::new(display))
            })
            .await?
            .clone();
        if *guest.gone.borrow() {
            // The VMI went away while its display started: stop it again.
            display.stop().await;
            bail!("the VMI is gone");
        }
        Ok(display)
    }

    /// Writes the VM's current RDP credentials ([`rdp_credentials`]) into the SAM file of the
    /// display's RDP server. When the VM cannot be read the file stays as it is, and when it
    /// cannot be written the RDP server keeps the old one: both are logged (never the
    /// credentials).
    async fn write_rdp_credentials(&self, key: &GuestKey, display: &Display) {
        let Some(sam_file) = &display.sam_file else {
            return;
        };
        let Some(annotations) = self.vm_annotations(key).await else {
            return;
        };
        let (user, password) = rdp_credentials(&annotations);
        if let Err(e) = write_sam(sam_file, &user, &password) {
            tracing::warn!(guest = ?key, error = %format!("{e:#}"), "writing the RDP SAM file failed");
        }
    }

    /// The annotations of the guest's VM (empty when it is gone); `None` when it cannot be read
    /// (logged).
    async fn vm_annotations(&self, key: &GuestKey) -> Option<BTreeMap<String, String>> {
        let vms: Api<VirtualMachine> = Api::namespaced(self.client.clone(), &key.namespace);
        match vms.get_opt(&key.name).await {
            Ok(vm) => Some(vm.map(|vm| vm.annotations().clone()).unwrap_or_default()),
            Err(e) => {
                tracing::warn!(guest = ?key, error = %e, "reading the guest's VM failed");
                None
            }
        }
    }

    /// Connects to guest TCP port `port` of a running VMI whose open ports are `open`:
    /// 22 → the sandbox's sshd, 3389 → the VMI's RDP server (starting its display, and
    /// writing the VM's current RDP credentials first), another
    /// open port → an echo service; closed ports (and 5900 always) are refused.
    ///
    /// Errors: a [`DialError`] worded like Go's `net.Dial` (`dial tcp 127.0.0.1:<port>:
    /// connect: connection refused`).
    pub async fn dial(
        &self,
        guest: &Arc<Guest>,
        port: u16,
        open: &[u16],
    ) -> Result<Box<dyn GuestIo>, DialError> {
        let refused = || {
            DialError(format!(
                "dial tcp 127.0.0.1:{port}: connect: connection refused"
            ))
        };
        if port == VNC_PORT || !open.contains(&port) {
            return Err(refused());
        }
        let local = match port {
            SSH_PORT => self.ssh_port,
            RDP_PORT => match self.display(guest).await {
                Ok(display) => {
                    self.write_rdp_credentials(&guest.key, &display).await;
                    display.rdp_port
                }
                Err(e) => {
                    tracing::warn!(guest = ?guest.key, error = %format!("{e:#}"), "no display for RDP");
                    None
                }
            },
            _ => {
                let (near, far) = tokio::io::duplex(64 * 1024);
                tokio::spawn(async move {
                    let (mut read, mut write) = tokio::io::split(far);
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
                return Ok(Box::new(near));
            }
        };
        let local = local.ok_or_else(refused)?;
        TcpStream::connect(("127.0.0.1", local))
            .await
            .map(|tcp| Box::new(tcp) as Box<dyn GuestIo>)
            .map_err(|_| refused())
    }

    /// Stops the servers of guests whose VMI is no longer running, from a watch of all VMIs
    /// (and every 2 s, to catch a display started just as its VMI went). A guest younger than
    /// [`REAP_GRACE`] is left alone, since the watch may not have caught up with the VMI it was
    /// made for. Runs until aborted.
    pub async fn run_reaper(self: Arc<Self>) {
        let api: Api<VirtualMachineInstance> = Api::all(self.client.clone());
        let (reader, writer) = reflector::store();
        let events = reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff();
        let mut events = std::pin::pin!(events);
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        let mut ready = false;
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(watcher::Event::InitDone)) => ready = true,
                    Some(_) => {}
                    None => return,
                },
                _ = tick.tick() => {}
            }
            if !ready {
                continue;
            }
            let dead: Vec<Arc<Guest>> = {
                let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
                let keys: Vec<GuestKey> = map
                    .iter()
                    .filter(|(_, guest)| guest.born.elapsed() > REAP_GRACE)
                    .map(|(key, _)| key)
                    .filter(|key| {
                        let object = ObjectRef::new(&key.name).within(&key.namespace);
                        !reader.get(&object).is_some_and(|vmi| {
                            vmi.uid().as_deref() == Some(key.uid.as_str())
                                && vmi.metadata.deletion_timestamp.is_none()
                                && vmi
                                    .status
                                    .as_ref()
                                    .and_then(|s| s.get("phase"))
                                    .and_then(Value::as_str)
                                    == Some("Running")
                        })
                    })
                    .cloned()
                    .collect();
                keys.iter().filter_map(|k| map.remove(k)).collect()
            };
            for guest in dead {
                tracing::debug!(guest = ?guest.key, "VMI gone: stopping its guest servers");
                guest.stop().await;
            }
        }
    }

    /// Stops every guest's servers and closes its streams.
    pub async fn shutdown(&self) {
        let all: Vec<Arc<Guest>> = {
            let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
            map.drain().map(|(_, g)| g).collect()
        };
        for guest in all {
            guest.stop().await;
        }
    }

    /// Kills every guest's servers at once (SIGKILL, without waiting): for `Drop`.
    pub fn kill_now(&self) {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        for guest in map.values() {
            let _ = guest.gone.send(true);
            if let Some(display) = guest.display.get() {
                let mut procs = display.procs.lock().unwrap_or_else(|e| e.into_inner());
                for child in procs.iter_mut() {
                    let _ = child.start_kill();
                }
            }
        }
    }
}

impl Guest {
    /// Resolves once the VMI is gone (its servers stopped); streams end then.
    pub async fn gone(&self) {
        let mut rx = self.gone.subscribe();
        let _ = rx.wait_for(|gone| *gone).await;
    }

    /// Whether a VNC viewer holds the slot now.
    pub fn viewing(&self) -> bool {
        let viewer = self.viewer.lock().unwrap_or_else(|e| e.into_inner());
        viewer.as_ref().is_some_and(|v| !v.kick.is_closed())
    }

    /// Takes the VNC viewer slot, as virt-handler does for a new VNC connection: with
    /// `preserve_session` a current viewer keeps it (`None`: virt-api's 503); without, the
    /// current viewer is kicked (its stream closes) and the caller takes over.
    pub fn take_viewer(
        self: &Arc<Self>,
        preserve_session: bool,
        ids: &Guests,
    ) -> Option<ViewerSlot> {
        let mut slot = self.viewer.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(current) = slot.take() {
            if preserve_session && !current.kick.is_closed() {
                *slot = Some(current);
                return None;
            }
            let _ = current.kick.send(());
        }
        let (kick, kicked) = oneshot::channel();
        let id = ids.next_id.fetch_add(1, Ordering::Relaxed);
        *slot = Some(Viewer { id, kick });
        Some(ViewerSlot {
            guest: self.clone(),
            id,
            kicked,
        })
    }

    /// Takes a usbredir slot and records the new count on the VMI; `None` when all
    /// [`USBREDIR_SLOTS`] are taken.
    pub async fn attach_usb(self: &Arc<Self>, client: &Client) -> Option<UsbSlot> {
        let mut count = self.usb.lock().await;
        if *count >= USBREDIR_SLOTS {
            return None;
        }
        *count += 1;
        annotate(
            client,
            &self.key,
            json!({ USBREDIR_ATTACHED_ANNOTATION: count.to_string() }),
        )
        .await;
        Some(UsbSlot {
            guest: self.clone(),
            client: client.clone(),
        })
    }

    async fn stop(&self) {
        let _ = self.gone.send(true);
        if let Some(display) = self.display.get() {
            display.stop().await;
        }
    }
}

impl ViewerSlot {
    /// Resolves when another viewer took over (or the slot was otherwise released).
    pub async fn kicked(&mut self) {
        let _ = (&mut self.kicked).await;
    }
}

impl Drop for ViewerSlot {
    fn drop(&mut self) {
        let mut slot = self.guest.viewer.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_some_and(|v| v.id == self.id) {
            *slot = None;
        }
    }
}

impl Drop for UsbSlot {
    fn drop(&mut self) {
        let guest = self.guest.clone();
        let client = self.client.clone();
        let release = async move {
            let mut count = guest.usb.lock().await;
            *count = count.saturating_sub(1);
            annotate(
                &client,
                &guest.key,
                json!({ USBREDIR_ATTACHED_ANNOTATION: count.to_string() }),
            )
            .await;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(release);
        }
    }
}

/// Merges `annotations` into the VMI's, only on that incarnation (the uid is a precondition);
/// failures (the VMI is gone) are logged and ignored.
async fn annotate(client: &Client, key: &GuestKey, annotations: Value) {
    let api: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &key.namespace);
    let patch = json!({ "metadata": { "uid": key.uid, "annotations": annotations } });
    if let Err(e) = api
        .patch(&key.name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        tracing::debug!(guest = ?key, error = %e, "annotating the VMI failed");
    }
}

/// The background colour of a VMI's screen: derived from its namespace and name, mid-dark so
/// that the black-on-white name window stands out.
pub fn screen_colour(key: &GuestKey) -> String {
    let digest = sha2::Sha256::digest(format!("{}/{}", key.namespace, key.name).as_bytes());
    let channel = |b: u8| 40 + u16::from(b) * 130 / 255;
    format!(
        "#{:02x}{:02x}{:02x}",
        channel(digest[0]),
        channel(digest[1]),
        channel(digest[2])
    )
}

impl Display {
    /// Starts Xvnc on a free display (`-displayfd`) and a free RFB port, draws the VMI's screen
    /// and starts the RDP server `server` with the VM's files in `rdp_home` (a failure of the
    /// RDP server is logged, not fatal: port 3389 is then closed).
    async fn start(
        key: &GuestKey,
        dir: &Path,
        rdp_home: &Path,
        server: RdpServer,
    ) -> Result<Display> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let xvnc = program("Xvnc", "tigervnc-standalone-server")?;
        let log = dir.join("xvnc.log");
        let label = format!("{}/{}", key.namespace, key.name);
        let mut failure = String::new();
        for _ in 0..3 {
            let rfb_port = free_port()?;
            let mut cmd = command(&xvnc, &log)?;
            cmd.args(["-displayfd", "1", "-localhost", "-SecurityTypes", "None"])
                .args(["-geometry", GEOMETRY, "-depth", "24"])
                .arg("-rfbport")
                .arg(rfb_port.to_string())
                .arg("-desktop")
                .arg(&label)
                .stdout(Stdio::piped());
            let mut child = cmd.spawn().context("start Xvnc")?;
            let Some(stdout) = child.stdout.take() else {
                bail!("Xvnc's stdout was not captured");
            };
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            let number = tokio::time::timeout(Duration::from_secs(15), lines.next_line()).await;
            let number = match number {
                Ok(Ok(Some(line))) => line.trim().parse::<u32>().ok(),
                _ => None,
            };
            let Some(number) = number else {
                let _ = child.kill().await;
                failure = log_tail(&log);
                continue;
            };
            // Keep reading its stdout so that Xvnc never writes into a closed pipe.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            let xvnc_pid = child.id().unwrap_or_default();
            let mut display = Display {
                number,
                rfb_port,
                xvnc_pid,
                rdp_port: None,
                typed_text: dir.join("typed.txt"),
                sam_file: (server == RdpServer::Shadow).then(|| dir.join("rdp").join("sam")),
                procs: Mutex::new(Vec::new()),
            };
            if let Err(e) = display.draw(key, dir).await {
                tracing::warn!(guest = ?key, error = %format!("{e:#}"), "drawing the guest screen failed");
            }
            let rdp = match server {
                RdpServer::Shadow => display.start_rdp(dir, rdp_home).await,
                RdpServer::Xrdp => super::xrdp::start(rfb_port, dir, rdp_home).await,
            };
            match rdp {
                Ok((port, rdp)) => {
                    display.rdp_port = Some(port);
                    display
                        .procs
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(0, rdp);
                }
                Err(e) => {
                    tracing::warn!(guest = ?key, error = %format!("{e:#}"), "no RDP server: guest port 3389 stays closed");
                }
            }
            display
                .procs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(child);
            let rdp_port = display.rdp_port;
            tracing::debug!(guest = ?key, display = number, rfb_port, ?rdp_port, "guest display started");
            return Ok(display);
        }
        bail!("Xvnc did not start; its log:\n{failure}")
    }

    fn x_command(&self, program: &Path, log: &Path) -> Result<tokio::process::Command> {
        let mut cmd = command(program, log)?;
        cmd.env("DISPLAY", format!(":{}", self.number));
        Ok(cmd)
    }

    /// The screen: the VMI's colour as background, a window naming the VMI and the typing sink
    /// (started last, since it takes the keyboard focus; ready once its file exists).
    async fn draw(&self, key: &GuestKey, dir: &Path) -> Result<()> {
        let log = dir.join("x-clients.log");
        let xsetroot = program("xsetroot", "x11-xserver-utils")?;
        let mut cmd = self.x_command(&xsetroot, &log)?;
        cmd.arg("-solid").arg(screen_colour(key));
        let status = tokio::time::timeout(Duration::from_secs(10), cmd.status())
            .await
            .context("xsetroot timed out")??;
        if !status.success() {
            bail!("xsetroot failed ({status}): {}", log_tail(&log));
        }
        let xmessage = program("xmessage", "x11-utils")?;
        let mut cmd = self.x_command(&xmessage, &log)?;
        cmd.args(["-center", "-buttons", ""]).arg(format!(
            "{}/{}\n\nCorral VDI sandbox guest\n(no guest OS: a TigerVNC X display)",
            key.namespace, key.name
        ));
        let child = cmd.spawn().context("start xmessage")?;
        self.procs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(child);
        self.start_typing_sink(&log).await
    }

    /// The typing sink (see the module docs): an xterm at the top left running
    /// [`TYPING_SINK_SCRIPT`]. Returns once its file exists.
    ///
    /// Errors: xterm or xdotool is missing, or the file did not appear within 15 s (the X
    /// clients' log is in the error).
    async fn start_typing_sink(&self, log: &Path) -> Result<()> {
        let xterm = program("xterm", "xterm")?;
        let xdotool = program("xdotool", "xdotool")?;
        match std::fs::remove_file(&self.typed_text) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).context("remove an old typed-text file");
            }
            _ => {}
        }
        let mut cmd = self.x_command(&xterm, log)?;
        cmd.args(["-geometry", "72x6+16+16", "-title", TYPING_SINK_TITLE])
            .args(["-e", "sh", "-c", TYPING_SINK_SCRIPT, "corral-typing-sink"])
            .arg(&self.typed_text)
            .arg(&xdotool);
        let mut child = cmd.spawn().context("start xterm")?;
        let deadline = Instant::now() + Duration::from_secs(15);
        while !self.typed_text.exists() {
            if let Some(status) = child.try_wait()? {
                bail!(
                    "the typing sink's xterm exited ({status}): {}",
                    log_tail(log)
                );
            }
            if Instant::now() > deadline {
                let _ = child.kill().await;
                bail!(
                    "the typing sink was not ready within 15 s: {}",
                    log_tail(log)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.procs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(child);
        Ok(())
    }

    /// `freerdp-shadow-cli` shadowing this display on a free port of 127.0.0.1, taking NLA
    /// only, against the SAM file in `<dir>/rdp/` (see the module docs; the caller writes it),
    /// with `HOME` `home`, where it makes its certificate once and then keeps using it
    /// (`.config/freerdp/shadow/shadow.crt`). Returns the port once it accepts connections, and
    /// the process.
    async fn start_rdp(&self, dir: &Path, home: &Path) -> Result<(u16, Child)> {
        let shadow = program("freerdp-shadow-cli", "freerdp2-shadow-x11")?;
        std::fs::create_dir_all(home)?;
        let Some(sam_file) = &self.sam_file else {
            bail!("no SAM file for the shadow server");
        };
        if let Some(sam_dir) = sam_file.parent() {
            std::fs::create_dir_all(sam_dir)?;
        }
        let log = dir.join("rdp.log");
        spawn_listening(&log, |port| {
            let mut cmd = self.x_command(&shadow, &log)?;
            cmd.env("HOME", home)
                .env("XDG_CONFIG_HOME", home.join(".config"))
                .arg(format!("/port:{port}"))
                .arg("/bind-address:127.0.0.1")
                .args(["+auth", "/sec:nla"])
                .arg(format!("/sam-file:{}", sam_file.display()));
            Ok(cmd)
        })
        .await
    }

    /// A PNG of the whole screen (ImageMagick's `import -window root`).
    ///
    /// Errors: `import` is missing, failed or took more than 10 s (its stderr is in the error).
    pub async fn screenshot(&self) -> Result<Vec<u8>> {
        let import = program("import", "imagemagick")?;
        let mut cmd = tokio::process::Command::new(import);
        cmd.env("DISPLAY", format!(":{}", self.number))
            .args(["-window", "root", "png:-"])
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let output = tokio::time::timeout(Duration::from_secs(10), cmd.output())
            .await
            .context("import timed out after 10 s")??;
        if !output.status.success() || !output.stdout.starts_with(b"\x89PNG") {
            bail!(
                "import -window root failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(output.stdout)
    }

    /// Stops the RDP server, the X clients and Xvnc.
    pub async fn stop(&self) {
        let procs: Vec<Child> = {
            let mut procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
            procs.drain(..).collect()
        };
        for mut child in procs {
            terminate(&mut child, Duration::from_secs(2)).await;
        }
    }
}
