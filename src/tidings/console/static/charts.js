// A small line chart on a canvas (no library): a rolling window of points per series.
const COLORS = ["#1f5fbf", "#1d7a3a", "#8a5a00", "#7b3fb3", "#b3261e"];

export class LineChart {
  constructor(canvas, names, windowPoints = 60) {
    this.canvas = canvas; this.names = names; this.max = windowPoints;
    this.points = []; // [t, [v...]]
    this.draw();
  }
  push(t, values) {
    this.points.push([t, values]);
    if (this.points.length > this.max) this.points.shift();
    // What the chart shows, for people using a screen reader and for tests: the newest
    // sample and the highest value of each series in the window.
    const peak = this.names.map((_, s) => Math.max(...this.points.map(([, vs]) => vs[s])));
    this.canvas.dataset.last = JSON.stringify(values);
    this.canvas.dataset.peak = JSON.stringify(peak);
    this.draw();
  }
  draw() {
    const c = this.canvas, ratio = window.devicePixelRatio || 1;
    const w = c.clientWidth || 600, hgt = c.clientHeight || 220;
    if (c.width !== Math.round(w * ratio)) { c.width = Math.round(w * ratio); c.height = Math.round(hgt * ratio); }
    const g = c.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, w, hgt);
    const left = 44, right = 8, top = 8, bottom = 20;
    let ymax = 1;
    for (const [, vs] of this.points) for (const v of vs) if (v > ymax) ymax = v;
    ymax = niceCeil(ymax);
    g.font = "11px system-ui, sans-serif"; g.fillStyle = "#5b6470"; g.strokeStyle = "#e3e6ea"; g.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const y = top + (hgt - top - bottom) * (1 - i / 4);
      g.beginPath(); g.moveTo(left, y); g.lineTo(w - right, y); g.stroke();
      g.fillText(figure(ymax * i / 4), 2, y + 4);
    }
    g.fillText(this.points.length ? (this.points.length - 1) + " s ago" : "waiting for data", left, hgt - 4);
    g.fillText("now", w - right - 22, hgt - 4);
    const n = this.max - 1;
    const x = (i) => left + (w - left - right) * ((this.max - this.points.length + i) / n);
    const y = (v) => top + (hgt - top - bottom) * (1 - v / ymax);
    this.names.forEach((_, s) => {
      g.strokeStyle = COLORS[s % COLORS.length]; g.lineWidth = 2; g.beginPath();
      this.points.forEach(([, vs], i) => { const px = x(i), py = y(vs[s]); if (i) g.lineTo(px, py); else g.moveTo(px, py); });
      g.stroke();
    });
  }
}

function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// An axis label: a count with separators ("2,000"), below 100 to one decimal; never in
// scientific notation (Number's toString writes 1e21 and 1e-7 so).
export function figure(v) {
  return v.toLocaleString("en-US", { maximumFractionDigits: Math.abs(v) >= 100 ? 0 : 1, useGrouping: true });
}

// Rates and levels of one subscription from two snapshots of its counters.
export function sample(prev, cur, dtSeconds) {
  const rate = (k) => (prev && dtSeconds > 0 ? Math.max(0, (cur[k] - prev[k]) / dtSeconds) : 0);
  return [rate("published"), rate("sent"), cur.pending, rate("retries"), cur.deadLetters];
}

export const SERIES = ["publish rate /s", "delivery rate /s", "pending", "retries /s", "dead letters"];
