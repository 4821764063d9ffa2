import { useCallback, useEffect, useRef, useState } from "react";
import {
  assignMember,
  claimDesktop,
  deletePool,
  keepDesktop,
  onClaimProgress,
  unassignMember,
  type Result,
} from "./api";
import type { ClaimProgress, ErrorView, HistoryOf, MemberView, PoolView } from "./bindings";
import type { Notice } from "./components/ActionNotice";
import {
  actionKeys,
  formatClaimed,
  formatReleased,
  isClaimAction,
  type PoolChoice,
} from "./lib/claims";
import { formatPoolDeleted } from "./lib/pools";
import { formatKept } from "./lib/reclaim";

/** The dialog on screen, if any. */
export type DialogSpec =
  | { kind: "assign"; namespace: string; pool: string }
  | { kind: "release"; namespace: string; member: string; holder: string | null; force: boolean }
  | { kind: "newPool"; namespace: string }
  | { kind: "deletePool"; namespace: string; pool: string }
  | { kind: "poolSettings"; namespace: string; pool: string }
  | { kind: "history"; namespace: string; of: HistoryOf }
  | { kind: "usage"; namespace: string; pool: string };

export type OpenDialog = {
  spec: DialogSpec;
  /** Why the dialog's last attempt failed. */
  error: ErrorView | null;
};

/** The action a dialog runs, so that buttons and results find their dialog. */
export function dialogActionKey(spec: DialogSpec): string {
  switch (spec.kind) {
    case "assign":
      return actionKeys.assign(spec.namespace, spec.pool);
    case "release":
      return actionKeys.release(spec.namespace, spec.member);
    case "newPool":
      return actionKeys.createPool(spec.namespace);
    case "deletePool":
      return actionKeys.deletePool(spec.namespace, spec.pool);
    case "poolSettings":
      return actionKeys.poolSettings(spec.namespace, spec.pool);
    case "history":
      return actionKeys.history(spec.namespace, spec.of);
    case "usage":
      return actionKeys.usage(spec.namespace, spec.pool);
  }
}

/**
 * The claim and pool actions' state: which commands run, the open dialog, the last outcome, and
 * the step of a claim the cluster's broker is finishing (`claimProgress`: the latest
 * `claim-progress` event while a claim or an assign runs, else null).
 *
 * A command's failure is shown in its dialog while that dialog is still open (so the user can
 * correct the input or read the refusal there); otherwise, and for every success, in the
 * notice. Starting an action clears the notice. Nothing is refetched afterwards: the live
 * snapshot brings the new state by itself.
 */
export function useClaimActions() {
  const [running, setRunning] = useState<ReadonlySet<string>>(() => new Set());
  const [notice, setNotice] = useState<Notice | null>(null);
  const [dialog, setDialogState] = useState<OpenDialog | null>(null);
  const [claimProgress, setClaimProgress] = useState<ClaimProgress | null>(null);

  // Read only in callbacks.
  const runningRef = useRef(new Set<string>());
  const dialogKeyRef = useRef<string | null>(null);
  const noticeIdRef = useRef(0);

  useEffect(() => {
    let live = true;
    let unlisten: (() => void) | null = null;
    void onClaimProgress((step) => {
      if (live) setClaimProgress(step);
    }).then((subscribed) => {
      if (!subscribed.ok) return;
      if (live) unlisten = subscribed.value;
      else subscribed.value();
    });
    return () => {
      live = false;
      unlisten?.();
    };
  }, []);

  const setDialog = useCallback((next: OpenDialog | null) => {
    dialogKeyRef.current = next === null ? null : dialogActionKey(next.spec);
    setDialogState(next);
  }, []);

  const run = useCallback(
    async <T>(
      key: string,
      source: string,
      command: () => Promise<Result<T>>,
      describe: (value: T) => string,
    ) => {
      if (runningRef.current.has(key)) return;
      runningRef.current.add(key);
      setRunning(new Set(runningRef.current));
      setNotice(null);
      setDialogState((d) =>
        d !== null && dialogActionKey(d.spec) === key ? { ...d, error: null } : d,
      );

      const result = await command();

      if (isClaimAction(key)) setClaimProgress(null);
      runningRef.current.delete(key);
      setRunning(new Set(runningRef.current));
      const inDialog = dialogKeyRef.current === key;
      noticeIdRef.current += 1;
      const id = noticeIdRef.current;
      if (result.ok) {
        if (inDialog) setDialog(null);
        setNotice({ id, kind: "success", text: describe(result.value) });
      } else if (inDialog) {
        setDialogState((d) => (d === null ? d : { ...d, error: result.error }));
      } else {
        setNotice({ id, kind: "error", source, error: result.error });
      }
    },
    [setDialog],
  );

  const openAssign = useCallback(
    (pool: PoolView) => {
      setDialog({
        spec: { kind: "assign", namespace: pool.namespace, pool: pool.name },
        error: null,
      });
    },
    [setDialog],
  );

  const openRelease = useCallback(
    (member: MemberView, force: boolean) => {
      setDialog({
        spec: {
          kind: "release",
          namespace: member.namespace,
          member: member.name,
          holder: member.holder,
          force,
        },
        error: null,
      });
    },
    [setDialog],
  );

  /** "New pool…": the dialog runs the create itself and shows its progress and outcome. */
  const openNewPool = useCallback(
    (namespace: string) => {
      setDialog({ spec: { kind: "newPool", namespace }, error: null });
    },
    [setDialog],
  );

  const openDeletePool = useCallback(
    (pool: PoolView) => {
      setDialog({
        spec: { kind: "deletePool", namespace: pool.namespace, pool: pool.name },
        error: null,
      });
    },
    [setDialog],
  );

  /** A pool's settings (the dialog reads and writes them itself). */
  const openPoolSettings = useCallback(
    (pool: PoolView) => {
      setDialog({
        spec: { kind: "poolSettings", namespace: pool.namespace, pool: pool.name },
        error: null,
      });
    },
    [setDialog],
  );

  /** A pool's history (its members' and its own audit Events). */
  const openPoolHistory = useCallback(
    (pool: PoolView) => {
      setDialog({
        spec: { kind: "history", namespace: pool.namespace, of: { kind: "pool", name: pool.name } },
        error: null,
      });
    },
    [setDialog],
  );

  /** A managed pool's hourly usage (from its view: nothing to read). */
  const openPoolUsage = useCallback(
    (pool: PoolView) => {
      setDialog({
        spec: { kind: "usage", namespace: pool.namespace, pool: pool.name },
        error: null,
      });
    },
    [setDialog],
  );

  /** A member's history (its audit Events). */
  const openHistory = useCallback(
    (member: MemberView) => {
      setDialog({
        spec: {
          kind: "history",
          namespace: member.namespace,
          of: { kind: "member", name: member.name },
        },
        error: null,
      });
    },
    [setDialog],
  );

  const closeDialog = useCallback(() => {
    setDialog(null);
  }, [setDialog]);

  /** Shows `text` as the outcome of something a dialog did itself. */
  const announce = useCallback((text: string) => {
    noticeIdRef.current += 1;
    setNotice({ id: noticeIdRef.current, kind: "success", text });
  }, []);

  const dismissNotice = useCallback(() => {
    setNotice(null);
  }, []);

  const assign = useCallback(
    (namespace: string, pool: string, user: string) => {
      void run(
        actionKeys.assign(namespace, pool),
        `Assign from ${pool}`,
        () => assignMember(namespace, pool, user),
        (claimed) => formatClaimed(claimed, "assign"),
      );
    },
    [run],
  );

  const claim = useCallback(
    (choice: PoolChoice) => {
      void run(
        actionKeys.claim,
        `Get a desktop from ${choice.pool}`,
        () => claimDesktop(choice.namespace, choice.pool),
        (claimed) => formatClaimed(claimed, "claim"),
      );
    },
    [run],
  );

  const release = useCallback(
    (namespace: string, member: string, force: boolean) => {
      void run(
        actionKeys.release(namespace, member),
        force ? `Force release ${member}` : `Release ${member}`,
        () => unassignMember(namespace, member, force),
        formatReleased,
      );
    },
    [run],
  );

  const removePool = useCallback(
    (namespace: string, pool: string, force: boolean) => {
      void run(
        actionKeys.deletePool(namespace, pool),
        `Delete pool ${pool}`,
        () => deletePool(namespace, pool, force),
        formatPoolDeleted,
      );
    },
    [run],
  );

  /** Keep on a reclaim notice: renews your claim of `member`. */
  const keep = useCallback(
    (namespace: string, member: string) => {
      void run(
        actionKeys.keep(namespace, member),
        `Keep ${member}`,
        () => keepDesktop(namespace, member),
        formatKept,
      );
    },
    [run],
  );

  return {
    running,
    claimProgress,
    notice,
    dialog,
    openAssign,
    openRelease,
    openNewPool,
    openDeletePool,
    openPoolSettings,
    openHistory,
    openPoolHistory,
    openPoolUsage,
    closeDialog,
    announce,
    dismissNotice,
    assign,
    claim,
    release,
    keep,
    deletePool: removePool,
  };
}
