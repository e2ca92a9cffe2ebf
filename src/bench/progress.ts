/**
 * Progress of a sweep: on a TTY a cli-progress bar with what is running and what is left; in a log
 * (no TTY) one line per case, because a redrawn bar becomes hundreds of lines of noise in a file.
 */
import cliProgress from 'cli-progress';

export interface Progress {
  /** Starts (or re-sizes) the count: `total` cases in all. */
  start(total: number): void;
  /** Case `done + 1` of the total is starting; `label` says what it is. */
  update(done: number, label: string): void;
  stop(): void;
}

/** Nothing shown: tests, and callers that print their own. */
export const SILENT_PROGRESS: Progress = { start() {}, update() {}, stop() {} };

/** A bar on a TTY stream, numbered lines otherwise. Writes to stderr so stdout stays the report. */
export function terminalProgress(stream: NodeJS.WriteStream = process.stderr): Progress {
  if (!stream.isTTY) {
    let total = 0;
    return {
      start(t) {
        total = t;
      },
      update(done, label) {
        stream.write(`[${done + 1}/${total}] ${label}\n`);
      },
      stop() {},
    };
  }
  const bar = new cliProgress.SingleBar(
    {
      stream,
      format: '{bar} {value}/{total} · {eta_formatted} left · {label}',
      barsize: 24,
      hideCursor: true,
      clearOnComplete: true,
      etaBuffer: 20,
    },
    cliProgress.Presets.shades_classic,
  );
  let started = false;
  return {
    start(total) {
      if (started) bar.setTotal(total);
      else bar.start(total, 0, { label: '' });
      started = true;
    },
    update(done, label) {
      // Labels are cut so the line stays within 100 columns with the bar and counters.
      bar.update(done, { label: label.length > 44 ? `${label.slice(0, 43)}…` : label });
    },
    stop() {
      if (started) bar.stop();
      started = false;
    },
  };
}
