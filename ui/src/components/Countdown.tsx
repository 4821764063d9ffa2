import { useNow } from "../lib/clock";
import { formatCountdown } from "../lib/time";

type CountdownProps = {
  /** Epoch milliseconds to count towards. */
  targetMs: number;
  /** How far the API server's clock is ahead of ours, so the countdown follows its clock. */
  clockOffsetMs: number;
};

/** "in 42m 10s" / "expired 3m ago", re-rendered every second. */
export function Countdown({ targetMs, clockOffsetMs }: CountdownProps) {
  const now = useNow();
  const { text, past } = formatCountdown(targetMs, now + clockOffsetMs);
  return <span className={past ? "countdown countdown-past" : "countdown"}>{text}</span>;
}
