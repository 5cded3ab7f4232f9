"""A listener soak: hours of audio through the Listener `edgeosc listen` runs, its memory and a streaming model's
state checked as it goes. A long run must hold: memory flat, and a stream's state after hours what a fresh stream
over the same last frames holds (integers: bit for bit; float: within float32 rounding). A benchmark, not a test."""
from __future__ import annotations

import dataclasses
import os
import resource
from collections import deque

import numpy as np

from .stream import Listener, Model


def rss_mib() -> float:
    """This process's resident memory now (Linux /proc), or its peak elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def soak(model: Model, audio: np.ndarray, hours: float, hop_ms: float = 20.0, checks: int = 6,
         progress=None) -> dict:
    """Stream `hours` of `audio` (float32 at the model's rate, looped) through a Listener; `checks` times, evenly
    spread, record the process's memory and run the model's drift check (Model.verify) on the frames it last saw.
    progress(done, total) in seconds of audio."""
    if hours <= 0 or checks < 1 or not len(audio):
        raise ValueError("a soak needs hours > 0, checks >= 1 and some audio")
    seen: deque = deque(maxlen=4 * model.window + 8)  # the frames a fresh stream needs: every block's window (<= 3)
    if model.step is not None:
        step = model.step

        def recorded(frame):
            seen.append(np.array(frame, np.float32))
            return step(frame)
        model = dataclasses.replace(model, step=recorded)
    lis = Listener(model, hop_ms)
    sr = lis.cfg.sample_rate
    total, chunk = int(hours * 3600 * sr), sr
    marks = [round(total * (i + 1) / checks) for i in range(checks)]
    rows, done = [], 0
    for mark in marks:
        while done < mark:
            n = min(chunk, mark - done)
            at = done % len(audio)
            piece = audio[at:at + n]
            if len(piece) < n:  # the loop's seam
                piece = np.concatenate([piece, audio[:n - len(piece)]])
            lis.push(piece)
            done += n
            if progress:
                progress(done / sr, total / sr)
        drift = model.verify(list(seen)) if model.verify is not None and len(seen) == seen.maxlen else None
        rows.append(dict(hours=done / sr / 3600, rss_mib=rss_mib(), hops=lis.hops, detections=len(lis.detections),
                         drift=drift))
    stats = lis.stats()
    return dict(model=model.name, hours=total / sr / 3600, hop_ms=hop_ms, window=model.window, checks=rows,
                rss_growth_mib=rows[-1]["rss_mib"] - rows[0]["rss_mib"],
                drift_free=None if rows[-1]["drift"] is None else all(r["drift"]["equal"] for r in rows),
                detections_per_hour=len(lis.detections) / (total / sr / 3600),
                real_time_factor=stats["real_time_factor"])


def format_soak(r: dict) -> str:
    lines = [f"{r['model']}: {r['hours']:g} h of audio, one decision every {r['hop_ms']:g} ms "
             f"({'streaming, window ' + str(r['window']) if r['window'] else 'the whole window each hop'})",
             "  hours   resident memory (MiB)   detections   state against a fresh stream"]
    for c in r["checks"]:
        drift = "-" if c["drift"] is None else c["drift"]["detail"]
        lines.append(f"  {c['hours']:5.2f}   {c['rss_mib']:21.1f}   {c['detections']:10d}   {drift}")
    lines.append(f"  memory from the first check to the last: {r['rss_growth_mib']:+.1f} MiB; "
                 + ("no state check (not a streaming model)" if r["drift_free"] is None else
                    "the state held at every check" if r["drift_free"] else "THE STATE DRIFTED")
                 + f"; real-time factor {r['real_time_factor']:.4f}")
    return "\n".join(lines)
