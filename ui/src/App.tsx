import {
  Suspense,
  lazy,
  useCallback,
  useEffect,
  useMemo,
  useRef,
  useState,
  type ReactNode,
} from "react";
import type { MemberView, PoolView } from "./bindings";
import { ActionNotice } from "./components/ActionNotice";
import { Banner } from "./components/Banner";
import { DeniedNote } from "./components/DeniedNote";
import { EmptyState } from "./components/EmptyState";
import { Footer } from "./components/Footer";
import { Header } from "./components/Header";
import { FOCUS_FALLBACK_ID } from "./components/Modal";
import { MyDesktops } from "./components/MyDesktops";
import { PoolList } from "./components/PoolList";
import { LoadingPools, Placeholder } from "./components/StatePanels";
import { Dialogs } from "./Dialogs";
import { credentialBanner } from "./lib/credentials";
import { shownDialog } from "./lib/dialogs";
import {
  POOL_ORDERS,
  describeFilter,
  filterPools,
  stateQuery,
  parsePoolOrder,
  sortPools,
  stateTotals,
  type PoolOrder,
} from "./lib/pools";
import { poolKey } from "./lib/claims";
import { defaultSshUser } from "./lib/connect";
import { storeCollapsed, storeOrder, storedCollapsed, storedOrder, toggled } from "./lib/poolView";
import { feedIndicator } from "./lib/feed";
import { FALLBACK_NAMESPACE, describeScope, scopeNamespace } from "./lib/presentation";
import { sessionCounts } from "./lib/sessions";
import { formatDateTimeWithZone } from "./lib/time";
import { attachedCount } from "./lib/usb";
import { useBroker } from "./useBroker";
import { useClaimActions } from "./useClaimActions";
import { useCluster } from "./useCluster";
import type { RdpTarget } from "./components/RdpView";
import { useConsole } from "./useConsole";
import { usePermissions } from "./usePermissions";
import { useSessions } from "./useSessions";
import { useUsb } from "./useUsb";

// noVNC is most of the bundle: load it when a console first opens.
const ConsoleView = lazy(() =>
  import("./components/ConsoleView").then((m) => ({ default: m.ConsoleView })),
);

// The RDP web client (WebAssembly) is larger still: load it when RDP first opens.
const RdpView = lazy(() => import("./components/RdpView").then((m) => ({ default: m.RdpView })));

const NO_POOLS: readonly PoolView[] = [];

/**
 * The window: composes the cluster connection ([`useCluster`]), the claim, console, session
 * and USB hooks, the pools view and the dialog on top ([`Dialogs`]).
 */
export function App() {
  const actions = useClaimActions();
  const { closeDialog, dismissNotice } = actions;
  /** The member whose Connect dialog is open. */
  const [connectMember, setConnectMember] = useState<MemberView | null>(null);
  // A dialog about the previous cluster's pools would act on the new one, and a notice belongs
  // to the context it was made in.
  const onReplace = useCallback(() => {
    closeDialog();
    dismissNotice();
    setConnectMember(null);
  }, [closeDialog, dismissNotice]);
  const cluster = useCluster(onReplace);
  const { backendError, snapshot, shownCluster } = cluster;
  const brokerShown = useBroker(shownCluster);
  const broker = brokerShown === "checking" ? null : brokerShown;
  const [sessionsOpen, setSessionsOpen] = useState(false);
  const consoleView = useConsole();
  const sessions = useSessions();
  const usb = useUsb();
  const [usbOpen, setUsbOpen] = useState(false);
  const [capacityOpen, setCapacityOpen] = useState(false);
  const [filter, setFilter] = useState("");
  const filterRef = useRef<HTMLInputElement>(null);
  const mainRef = useRef<HTMLElement>(null);
  const [collapsed, setCollapsed] = useState(() => storedCollapsed(window.localStorage));
  const [order, setOrder] = useState<PoolOrder>(() => storedOrder(window.localStorage));
  useEffect(() => {
    storeCollapsed(window.localStorage, collapsed);
  }, [collapsed]);
  useEffect(() => {
    storeOrder(window.localStorage, order);
  }, [order]);
  const togglePool = useCallback((key: string) => {
    setCollapsed((prev) => toggled(prev, key));
  }, []);
  const scrollElement = useCallback(() => mainRef.current, []);

  /** The Connect… button that led to the console, to focus again when the console closes. */
  const connectOpenerRef = useRef<HTMLElement | null>(null);
  const consoleWasOpenRef = useRef(false);

  // "/" focuses the filter (as in GitHub or Gmail) and Home / End go to the first / last pool,
  // unless the user is typing somewhere.
  useEffect(() => {
    const onKey = (event: KeyboardEvent) => {
      if (event.ctrlKey || event.metaKey || event.altKey) return;
      if (!["/", "Home", "End"].includes(event.key)) return;
      const target = event.target;
      // Text fields take every key; a list (select) takes Home and End, not "/", which no
      // option starts with.
      const typing =
        target instanceof HTMLElement &&
        (target.isContentEditable ||
          ["INPUT", "TEXTAREA"].includes(target.tagName) ||
          (target.tagName === "SELECT" && event.key !== "/"));
      if (typing) return;
      if (target instanceof Element && target.closest("[role=dialog], .console-view") !== null) {
        return;
      }
      if (event.key === "/") {
        if (filterRef.current === null) return;
        event.preventDefault();
        filterRef.current.focus();
        return;
      }
      const main = mainRef.current;
      if (main === null) return;
      event.preventDefault();
      main.scrollTo({ top: event.key === "Home" ? 0 : main.scrollHeight });
    };
    window.addEventListener("keydown", onKey);
    return () => {
      window.removeEventListener("keydown", onKey);
    };
  }, []);

  const openConnect = useCallback((member: MemberView) => {
    connectOpenerRef.current =
      document.activeElement instanceof HTMLElement ? document.activeElement : null;
    setConnectMember(member);
  }, []);

  /** Closing the USB devices view drops a confirmation it showed. */
  const { cancel: cancelUsbConfirm } = usb;
  const closeUsb = useCallback(() => {
    cancelUsbConfirm();
    setUsbOpen(false);
  }, [cancelUsbConfirm]);

  const closeConnect = useCallback(() => {
    setConnectMember(null);
  }, []);

  const { open: openConsole } = consoleView;
  const openConsoleFromDialog = useCallback(
    (target: { namespace: string; member: string }) => {
      setConnectMember(null);
      openConsole(target);
    },
    [openConsole],
  );

  const [rdpTarget, setRdpTarget] = useState<RdpTarget | null>(null);
  const openRdpFromDialog = useCallback((target: RdpTarget) => {
    setConnectMember(null);
    setRdpTarget(target);
  }, []);

  // When the console (or RDP) closes, focus goes back to the Connect… button that led there.
  const consoleOpen = consoleView.state !== null || rdpTarget !== null;
  useEffect(() => {
    if (consoleWasOpenRef.current && !consoleOpen) {
      const opener = connectOpenerRef.current;
      if (
        opener !== null &&
        opener.isConnected &&
        !(opener instanceof HTMLButtonElement && opener.disabled)
      ) {
        opener.focus();
      } else {
        document.getElementById(FOCUS_FALLBACK_ID)?.focus();
      }
    }
    consoleWasOpenRef.current = consoleOpen;
  }, [consoleOpen]);

  const { contexts, kubeconfigUnreadable, scope } = cluster;
  const connected = backendError === null && shownCluster !== null;
  const status = snapshot?.status ?? null;
  // The cluster said no to a cluster-wide list: the main area says so with a namespace picker,
  // so no banner repeats it.
  const allNamespacesRefused =
    snapshot?.scope.kind === "all" &&
    status?.kind === "failing" &&
    status.error.kind === "forbidden";
  const allPools = snapshot?.pools ?? NO_POOLS;
  const shownPools = useMemo(
    () => sortPools(filterPools(allPools, filter), order),
    [allPools, filter, order],
  );
  const totals = useMemo(() => {
    const counts = allPools.reduce(
      (acc, p) => ({
        free: acc.free + p.counts.free,
        claimed: acc.claimed + p.counts.claimed,
        total: acc.total + p.counts.total,
      }),
      { free: 0, claimed: 0, total: 0 },
    );
    return { ...counts, byState: stateTotals(allPools) };
  }, [allPools]);
  const feed = feedIndicator({
    disconnected: backendError !== null || kubeconfigUnreadable || cluster.error !== null,
    waitingForContext: cluster.waitingForContext,
    status,
    judgedAt: snapshot?.judgedAt ?? null,
  });

  const credentialTrouble = credentialBanner(cluster.credentials);
  const banners = (
    <div className="banners">
      {credentialTrouble ? (
        <Banner
          severity="warning"
          source="Kubeconfig"
          error={credentialTrouble.error}
          note={credentialTrouble.note}
        />
      ) : null}
      {backendError ? (
        <Banner
          severity="error"
          source="Backend unavailable"
          error={backendError}
          note="The console must run inside the Corral VDI Console desktop app."
        />
      ) : null}
      {cluster.contextsState.kind === "failed" ? (
        <Banner
          severity="error"
          source="Reading kubeconfig"
          error={cluster.contextsState.error}
          action={{ label: "Try again", onClick: cluster.retryContexts }}
        />
      ) : null}
      {cluster.error ? (
        <Banner
          severity="error"
          source="Connecting"
          error={cluster.error}
          action={
            cluster.error.retryable ? { label: "Try again", onClick: cluster.retry } : undefined
          }
        />
      ) : null}
      {status?.kind === "failing" && !allNamespacesRefused && !kubeconfigUnreadable ? (
        <Banner
          severity="error"
          source="Live feed"
          error={status.error}
          note={
            snapshot === null || snapshot.pools.length === 0
              ? status.error.retryable
                ? "Retrying automatically; nothing has been received yet."
                : "Nothing has been received yet."
              : status.error.retryable
                ? "Retrying automatically; the data below is the last received and may be out of date."
                : "The data below is the last received and may be out of date."
          }
        />
      ) : null}
      {shownCluster?.identityError ? (
        <Banner
          severity="warning"
          source="Who am I"
          error={shownCluster.identityError}
          note="Pools are still shown; only your identity could not be determined."
        />
      ) : null}
    </div>
  );

  const identity = shownCluster?.identity ?? null;
  const username = identity?.username ?? null;
  // The namespaces on screen: the connection's one, or those of the pools listed.
  const clusterNamespace = shownCluster === null ? null : scopeNamespace(shownCluster.scope);
  const shownNamespaces =
    clusterNamespace !== null
      ? [clusterNamespace]
      : [...new Set((snapshot?.pools ?? []).map((p) => p.namespace))];
  const permissions = usePermissions(identity === null ? null : shownCluster, shownNamespaces);
  const claimDenied =
    clusterNamespace === null
      ? null
      : (() => {
          const claim = permissions.get(clusterNamespace)?.claim;
          return claim && !claim.allowed
            ? `You may not claim desktops here: ${claim.reason}`
            : null;
        })();

  const notice = actions.notice ? (
    <div className="action-notices">
      <ActionNotice notice={actions.notice} onDismiss={actions.dismissNotice} />
    </div>
  ) : null;

  const myDesktops =
    connected && snapshot !== null ? (
      <MyDesktops
        identity={identity}
        pools={snapshot.pools}
        scope={snapshot.scope}
        clockOffsetMs={cluster.clockOffsetMs}
        running={actions.running}
        claimProgress={actions.claimProgress}
        onClaim={actions.claim}
        onRelease={actions.openRelease}
        onConnect={openConnect}
        onKeep={(member) => {
          actions.keep(member.namespace, member.name);
        }}
        onHistory={actions.openHistory}
        permissionsFor={(ns) => permissions.get(ns) ?? null}
        claimDenied={claimDenied}
        loading={snapshot.status.kind === "syncing"}
        unreadable={snapshot.status.kind === "failing" && snapshot.pools.length === 0}
      />
    ) : null;

  // A pool is created in the one namespace the connection covers.
  const poolNamespace = clusterNamespace;
  const createAllowed =
    poolNamespace === null ? null : (permissions.get(poolNamespace)?.createPool ?? null);
  const createDenied = createAllowed !== null && !createAllowed.allowed;
  const toolbar = connected ? (
    <div className="pools-toolbar">
      <button
        type="button"
        className="btn btn-primary"
        data-testid="new-pool"
        disabled={poolNamespace === null || createDenied}
        aria-describedby={poolNamespace === null || createDenied ? "new-pool-blocked" : undefined}
        title={
          poolNamespace === null || createDenied
            ? undefined
            : `Clone a golden VM of namespace ${poolNamespace} into a new pool`
        }
        onClick={() => {
          if (poolNamespace !== null) actions.openNewPool(poolNamespace);
        }}
      >
        New pool…
      </button>
      {poolNamespace === null ? (
        <span id="new-pool-blocked" className="muted" data-testid="new-pool-blocked">
          A pool is created in one namespace: untick All namespaces to choose it.
        </span>
      ) : createDenied ? (
        <span
          id="new-pool-blocked"
          className="muted"
          data-testid="new-pool-blocked"
          title={createAllowed.reason ?? undefined}
        >
          You may not create pools in <span className="mono">{poolNamespace}</span> (hover for the
          cluster's reason).
        </span>
      ) : (
        <span className="muted">
          in namespace <span className="mono">{poolNamespace}</span>
        </span>
      )}
      {poolNamespace !== null ? (
        <DeniedNote permissions={permissions.get(poolNamespace) ?? null} />
      ) : null}
    </div>
  ) : null;

  const which = shownDialog({
    claim: actions.dialog !== null,
    connect: connectMember !== null,
    sessions: sessionsOpen,
    usb: usbOpen,
    capacity: capacityOpen && shownCluster !== null,
  });
  const dialog =
    which === null ? null : (
      <Dialogs
        which={which}
        actions={actions}
        sessions={sessions}
        usb={usb}
        snapshot={snapshot}
        cluster={shownCluster}
        connected={connected}
        identity={identity}
        username={username}
        connectMember={connectMember}
        brokered={broker?.brokered ?? false}
        onOpenConsole={openConsoleFromDialog}
        onOpenRdp={openRdpFromDialog}
        onCloseConnect={closeConnect}
        onCloseSessions={() => {
          setSessionsOpen(false);
        }}
        onCloseUsb={closeUsb}
        onCloseCapacity={() => {
          setCapacityOpen(false);
        }}
        permissionsFor={(ns) => permissions.get(ns) ?? null}
      />
    );

  let content: ReactNode;
  if (backendError) {
    content = (
      <Placeholder title="Not connected">The console backend is not available.</Placeholder>
    );
  } else if (cluster.contextsState.kind === "loading" && snapshot === null) {
    // (The connection made as the page started may bring pools before the contexts are read.)
    content = <LoadingPools message="Reading kubeconfig…" />;
  } else if (kubeconfigUnreadable) {
    content = (
      <Placeholder title="No kubeconfig contexts">
        Fix the kubeconfig problem above, or wait: the console reconnects by itself when the
        kubeconfig can be read again.
      </Placeholder>
    );
  } else if (cluster.waitingForContext) {
    content = (
      <Placeholder title="Choose a context">
        The kubeconfig sets no current-context. Pick one in the Context list to connect.
      </Placeholder>
    );
  } else if (snapshot === null) {
    content = cluster.error ? (
      <Placeholder title="Not connected">
        Could not connect to the cluster for {describeScope(scope)}. Change the context or
        namespace, or try again.
      </Placeholder>
    ) : (
      <LoadingPools message="Loading pools from the cluster…" />
    );
  } else if (allNamespacesRefused && snapshot.status.kind === "failing") {
    // Not "offline": the cluster answered, and said no to a cluster-wide list.
    const candidates = [
      ...new Set([
        cluster.namespace,
        ...contexts.flatMap((c) => (c.namespace === null ? [] : [c.namespace])),
        FALLBACK_NAMESPACE,
      ]),
    ];
    content = (
      <Placeholder title="You may not list pools in all namespaces">
        <p data-testid="all-namespaces-forbidden">
          The cluster refused a cluster-wide list: {snapshot.status.error.message}. Pick a namespace
          you work in:
        </p>
        <div className="namespace-picker" role="group" aria-label="Namespaces">
          {candidates.map((ns) => (
            <button
              key={ns}
              type="button"
              className="btn btn-small"
              data-testid={`pick-namespace-${ns}`}
              onClick={() => {
                cluster.pickNamespace(ns);
              }}
            >
              {ns}
            </button>
          ))}
        </div>
      </Placeholder>
    );
  } else if (snapshot.pools.length === 0) {
    if (snapshot.status.kind === "live") {
      content = <EmptyState scope={snapshot.scope} />;
    } else if (snapshot.status.kind === "syncing") {
      content = <LoadingPools message="Loading pools from the cluster…" />;
    } else {
      content = (
        <Placeholder title="No pool data">
          Nothing has been received for {describeScope(snapshot.scope)} yet.
        </Placeholder>
      );
    }
  } else {
    // While the feed fails, the data is as of the last time it was in sync, not of now.
    const stale = snapshot.status.kind === "failing";
    const asOf = stale ? (cluster.lastInSync?.at ?? null) : snapshot.judgedAt;
    const judged = formatDateTimeWithZone(asOf);
    content = (
      <div className={snapshot.status.kind === "failing" ? "pools pools-stale" : "pools"}>
        <div className="summary">
          <span>
            <strong>{snapshot.pools.length.toLocaleString("en-US")}</strong>{" "}
            {snapshot.pools.length === 1 ? "pool" : "pools"} in {describeScope(snapshot.scope)}
          </span>
          <span className="summary-sep" aria-hidden="true">
            ·
          </span>
          <span data-testid="pool-totals">
            <strong>{totals.free.toLocaleString("en-US")}</strong> free ·{" "}
            <strong>{totals.claimed.toLocaleString("en-US")}</strong> claimed ·{" "}
            <strong>{totals.total.toLocaleString("en-US")}</strong> members
          </span>
          {judged !== null && asOf !== null ? (
            <span
              className="summary-judged"
              data-testid="summary-judged"
              title={
                stale
                  ? `${asOf} (API server time)`
                  : `Follows every change; the last one was judged at ${asOf} (API server time)`
              }
            >
              {stale ? (
                <>
                  last in sync at <time dateTime={asOf}>{judged}</time>
                </>
              ) : (
                "up to date"
              )}
            </span>
          ) : null}
        </div>
        {totals.byState.length > 1 ? (
          <ul className="state-totals" aria-label="Members by state" data-testid="state-totals">
            {totals.byState.map((entry) => (
              <li key={entry.label}>
                <button
                  type="button"
                  className="link-button"
                  title={`Show only members that are ${entry.label}`}
                  onClick={() => {
                    setFilter(stateQuery(entry.label));
                  }}
                >
                  {entry.label}
                </button>{" "}
                <span className="tabular">{entry.count.toLocaleString("en-US")}</span>
              </li>
            ))}
          </ul>
        ) : null}
        <div className="pools-filter">
          <input
            ref={filterRef}
            type="search"
            className="filter-input"
            data-testid="pool-filter"
            aria-label="Filter pools and members"
            placeholder="Filter: pool, member, holder, state  ( / )"
            value={filter}
            onChange={(e) => {
              setFilter(e.target.value);
            }}
            onKeyDown={(e) => {
              if (e.key === "Escape" && filter !== "") {
                e.stopPropagation();
                setFilter("");
              }
            }}
          />
          <label className="pool-order">
            <span className="muted">Sort</span>
            <select
              data-testid="pool-order"
              value={order}
              onChange={(e) => {
                setOrder(parsePoolOrder(e.target.value));
              }}
            >
              {POOL_ORDERS.map((o) => (
                <option key={o.value} value={o.value}>
                  {o.label}
                </option>
              ))}
            </select>
          </label>
          <button
            type="button"
            className="btn btn-small"
            data-testid="collapse-all"
            onClick={() => {
              setCollapsed(
                (prev) =>
                  new Set([...prev, ...shownPools.map((p) => poolKey(p.namespace, p.name))]),
              );
            }}
          >
            Collapse all
          </button>
          <button
            type="button"
            className="btn btn-small"
            data-testid="expand-all"
            disabled={collapsed.size === 0}
            onClick={() => {
              setCollapsed((prev) => {
                const next = new Set(prev);
                for (const p of shownPools) next.delete(poolKey(p.namespace, p.name));
                return next;
              });
            }}
          >
            Expand all
          </button>
          {filter.trim() !== "" ? (
            <span className="muted" data-testid="pool-filter-result" role="status">
              {describeFilter(shownPools, snapshot.pools, filter)}
            </span>
          ) : null}
        </div>
        {shownPools.length === 0 ? (
          <p className="muted filter-empty" data-testid="pool-filter-empty">
            No pool or member matches “{filter.trim()}”.{" "}
            <button
              type="button"
              className="link-button"
              onClick={() => {
                setFilter("");
              }}
            >
              Clear the filter
            </button>
          </p>
        ) : null}
        <PoolList
          pools={shownPools}
          scrollElement={scrollElement}
          collapsed={collapsed}
          onToggle={togglePool}
          clockOffsetMs={cluster.clockOffsetMs}
          running={actions.running}
          onAssign={actions.openAssign}
          onDelete={actions.openDeletePool}
          onSettings={actions.openPoolSettings}
          onHistory={actions.openHistory}
          onPoolHistory={actions.openPoolHistory}
          onUsage={actions.openPoolUsage}
          onUnassign={actions.openRelease}
          onConnect={openConnect}
          permissionsFor={(ns) => permissions.get(ns) ?? null}
        />
      </div>
    );
  }

  return (
    <>
      <div className="app" inert={dialog !== null || consoleOpen}>
        <Header
          contexts={contexts}
          contextsLoading={cluster.contextsState.kind === "loading"}
          selectedContext={cluster.selectedContext}
          onContextChange={cluster.chooseContext}
          namespaceDraft={cluster.namespaceDraft}
          onNamespaceDraftChange={cluster.setNamespaceDraft}
          onNamespaceCommit={cluster.commitNamespace}
          onNamespaceRevert={cluster.revertNamespace}
          allNamespaces={cluster.allNamespaces}
          onAllNamespacesChange={cluster.chooseAllNamespaces}
          identity={identity}
          guard={shownCluster?.guard ?? null}
          broker={brokerShown}
          feed={feed}
          sessionCounts={sessionCounts(sessions.sessions)}
          onOpenSessions={() => {
            setSessionsOpen(true);
          }}
          usbCount={usb.list?.devices.length ?? null}
          usbAttached={usb.list === null ? 0 : attachedCount(usb.list.devices, sessions.sessions)}
          onOpenUsb={() => {
            setUsbOpen(true);
          }}
          onOpenCapacity={
            shownCluster === null
              ? null
              : () => {
                  setCapacityOpen(true);
                }
          }
        />
        <main
          ref={mainRef}
          id={FOCUS_FALLBACK_ID}
          className="app-main"
          aria-label="Pools"
          tabIndex={-1}
        >
          <div className="app-main-content">
            {banners}
            {notice}
            {myDesktops}
            {toolbar}
            {content}
          </div>
        </main>
        <Footer info={cluster.info} />
      </div>
      {consoleView.state !== null ? (
        <Suspense
          fallback={
            <div className="console-view console-loading" role="status">
              Loading the console…
            </div>
          }
        >
          <ConsoleView
            state={consoleView.state}
            sessions={sessions.sessions}
            onTakeOver={consoleView.takeOver}
            onReconnect={consoleView.reconnect}
            onClose={consoleView.close}
          />
        </Suspense>
      ) : null}
      {rdpTarget !== null ? (
        <Suspense
          fallback={
            <div className="console-view console-loading" role="status">
              Loading RDP…
            </div>
          }
        >
          <RdpView
            key={`${rdpTarget.namespace}/${rdpTarget.member}`}
            target={rdpTarget}
            defaultUser={defaultSshUser(username)}
            sessions={sessions.sessions}
            onClose={() => {
              setRdpTarget(null);
            }}
          />
        </Suspense>
      ) : null}
      {consoleOpen ? null : dialog}
    </>
  );
}
