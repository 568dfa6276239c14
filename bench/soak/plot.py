"""Plot a soak run's samples (bench/soak/run.sh) as one SVG of four panels over time: RSS and
peak RSS, open file descriptors, bytes under the run's temporary directory, and the handler
latency (p50, p95 and max of each window). Standard library only.

Usage: plot.py SOAK_CSV OUT_SVG
"""
import csv
import sys

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 760, 190, 70, 20, 30, 34
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def panel(rows, title, series, unit, y0):
    xs = [float(r["seconds"]) / 60 for r in rows]
    values = [v for _, key, scale in series for v in (float(r[key]) * scale for r in rows)]
    top = max(values + [1e-9]) * 1.1
    right = max(xs + [1e-9])
    w, h = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def px(x):
        return PAD_L + w * x / right

    def py(y):
        return y0 + PAD_T + h - h * y / top

    out = [f'<text x="{PAD_L}" y="{y0 + 18}" font-size="13" font-weight="bold">{title}</text>']
    out.append(f'<rect x="{PAD_L}" y="{y0 + PAD_T}" width="{w}" height="{h}" fill="none" stroke="#999"/>')
    for i in range(5):
        y = top * i / 4
        out.append(f'<text x="{PAD_L - 6}" y="{py(y) + 4:.1f}" font-size="10" text-anchor="end">{y:,.0f}</text>')
        out.append(f'<line x1="{PAD_L}" x2="{PAD_L + w}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#eee"/>')
    out.append(f'<text x="12" y="{y0 + PAD_T + h / 2:.0f}" font-size="10" transform="rotate(-90 12 {y0 + PAD_T + h / 2:.0f})" text-anchor="middle">{unit}</text>')
    for i in range(7):
        x = right * i / 6
        out.append(f'<text x="{px(x):.1f}" y="{y0 + PAD_T + h + 14}" font-size="10" text-anchor="middle">{x:.0f} min</text>')
    legend_x = PAD_L + 200
    for (label, key, scale), color in zip(series, COLORS):
        points = " ".join(f"{px(x):.1f},{py(float(r[key]) * scale):.1f}" for x, r in zip(xs, rows))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.3" points="{points}"/>')
        out.append(f'<text x="{legend_x}" y="{y0 + 18}" font-size="11" fill="{color}">{label}</text>')
        legend_x += 110
    return out


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    parts = []
    parts += panel(rows, "Memory", [("RSS", "rss_kb", 1 / 1024), ("peak RSS", "peak_rss_kb", 1 / 1024)], "MiB", 0)
    parts += panel(rows, "Open file descriptors", [("fds", "fds", 1)], "count", H)
    parts += panel(rows, "Temporary files", [("bytes in TMPDIR", "tmp_bytes", 1 / 1024)], "KiB", 2 * H)
    parts += panel(rows, "Handler latency per invocation (window of 10 s)",
                   [("p50", "p50_ms", 1), ("p95", "p95_ms", 1), ("max", "max_ms", 1)], "ms", 3 * H)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{4 * H}" font-family="sans-serif">',
           f'<rect width="{W}" height="{4 * H}" fill="white"/>'] + parts + ["</svg>"]
    open(sys.argv[2], "w").write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
