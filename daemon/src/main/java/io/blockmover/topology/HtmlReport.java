package io.blockmover.topology;

import java.io.IOException;
import java.time.Instant;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import com.fasterxml.jackson.jr.ob.JSON;

/**
 * The topology test's report as one self-contained HTML file: no network needed to view it, nothing loaded from
 * anywhere. The measurements are embedded as JSON; a small inline script draws three SVG charts from them (the
 * round-trip histogram, bandwidth over time per transport, write rate over time per volume) and marks each chart
 * it drew with {@code data-drawn}; the summary and the recommendations are plain HTML tables. Readable without
 * script too (tables only).
 */
public final class HtmlReport
{
    private HtmlReport()
    {
    }

    /**
     * @param result the result of a topology test (topology-status's "result").
     * @return the HTML document.
     * @throws IOException when the result cannot be written as JSON.
     */
    @SuppressWarnings("unchecked")
    public static String render(final Map<String, Object> result) throws IOException
    {
        final StringBuilder h = new StringBuilder(64 * 1024);
        final String title = "blockmover topology test: " + result.get("node") + " to " + result.get("peer");
        h.append("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>")
            .append(esc(title)).append("</title>\n<style>\n").append(CSS).append("</style></head>\n<body>\n");
        h.append("<h1>").append(esc(title)).append("</h1>\n<p class=\"meta\">")
            .append(esc(Instant.ofEpochMilli(((Number)result.get("started_ms")).longValue()).toString()))
            .append(", volumes sampled for ").append(((Number)result.get("duration_ms")).longValue() / 1000.0)
            .append(" s, workload ").append(esc(String.valueOf(result.get("workload"))))
            .append(", peer at ").append(esc(String.valueOf(result.get("peer_address")))).append("</p>\n");

        final Map<String, Object> rec = (Map<String, Object>)result.get("recommendations");
        h.append("<h2>Recommendations</h2>\n<table class=\"rec\">\n");
        row(h, "Log size (--log-size)", bytes(num(rec.get("log_bytes"))) + " : " +
            esc(String.valueOf(rec.get("log_rule"))) + "; outage " + num(rec.get("outage_seconds")) + " s x peak " +
            rate(num(rec.get("peak_write_rate_bps"))));
        row(h, "Initial sync", seconds(((Number)rec.get("initial_sync_seconds")).doubleValue()) + " at up to " +
            rate(num(rec.get("network_bandwidth_bps"))) + " over " + esc(String.valueOf(rec.get("network_transport"))));
        for (final Map<String, Object> s : (List<Map<String, Object>>)rec.get("initial_sync"))
        {
            row(h, "&nbsp;&nbsp;" + esc(String.valueOf(s.get("volume"))), bytes(num(s.get("size"))) + " at " +
                rate(num(s.get("rate_bps"))) + " (limited by " + esc(String.valueOf(s.get("limited_by"))) + "): " +
                seconds(((Number)s.get("seconds")).doubleValue()));
        }
        h.append("</table>\n");

        h.append("<h2>Network</h2>\n<table>\n<tr><th>transport</th><th>rtt min</th><th>p50</th><th>p99</th>" +
            "<th>pings</th><th>bandwidth</th><th>note</th></tr>\n");
        for (final Map<String, Object> t : (List<Map<String, Object>>)result.get("network"))
        {
            h.append("<tr><td>").append(esc(String.valueOf(t.get("transport")))).append("</td>");
            if (!Boolean.TRUE.equals(t.get("available")))
            {
                h.append("<td colspan=\"6\">not available: ").append(esc(String.valueOf(t.get("reason"))))
                    .append("</td></tr>\n");
                continue;
            }
            final Map<String, Object> rtt = (Map<String, Object>)t.get("rtt");
            if (rtt == null || !rtt.containsKey("p50_us"))
            {
                h.append("<td colspan=\"6\">").append(esc(String.valueOf(t.get("error")))).append("</td></tr>\n");
                continue;
            }
            h.append("<td>").append(rtt.get("min_us")).append(" us</td><td>").append(rtt.get("p50_us"))
                .append(" us</td><td>").append(rtt.get("p99_us")).append(" us</td><td>").append(rtt.get("count"))
                .append("</td><td>").append(rate(num(t.get("bandwidth_bps")))).append("</td><td>")
                .append(t.get("error") != null ? esc(String.valueOf(t.get("error"))) : "").append("</td></tr>\n");
        }
        h.append("</table>\n");

        h.append("<h2>Volumes</h2>\n<table>\n<tr><th>volume</th><th>size</th><th>peak write</th><th>mean write</th>" +
            "<th>read</th><th>write rate from</th></tr>\n");
        for (final Map<String, Object> v : (List<Map<String, Object>>)result.get("volumes"))
        {
            h.append("<tr><td>").append(esc(String.valueOf(v.get("path")))).append("</td><td>")
                .append(bytes(num(v.get("size")))).append("</td><td>").append(rate(num(v.get("write_rate_peak_bps"))))
                .append("</td><td>").append(rate(num(v.get("write_rate_mean_bps")))).append("</td><td>")
                .append(rate(num(v.get("read_rate_bps")))).append("</td><td>")
                .append(esc(String.valueOf(v.get("write_source")))).append("</td></tr>\n");
        }
        h.append("</table>\n");

        h.append("<h2>Round-trip time</h2>\n<svg id=\"chart-latency\" class=\"chart\" width=\"760\" height=\"280\" " +
            "viewBox=\"0 0 760 280\"></svg>\n");
        h.append("<h2>Bandwidth over time</h2>\n<svg id=\"chart-bandwidth\" class=\"chart\" width=\"760\" " +
            "height=\"280\" viewBox=\"0 0 760 280\"></svg>\n");
        h.append("<h2>Write rate over time</h2>\n<svg id=\"chart-writes\" class=\"chart\" width=\"760\" " +
            "height=\"280\" viewBox=\"0 0 760 280\"></svg>\n");
        h.append("<p class=\"meta\">Made by blockmover topology-test. Charts are drawn by the script in this file " +
            "from the measurements embedded below; nothing is fetched.</p>\n");
        // "</" inside the JSON would end the script element early: "<\/" means the same to JSON.
        h.append("<script type=\"application/json\" id=\"data\">")
            .append(JSON.std.asString(result).replace("</", "<\\/")).append("</script>\n");
        h.append("<script>\n").append(SCRIPT).append("</script>\n</body></html>\n");
        return h.toString();
    }

    private static void row(final StringBuilder h, final String key, final String value)
    {
        h.append("<tr><th>").append(key).append("</th><td>").append(value).append("</td></tr>\n");
    }

    private static long num(final Object o)
    {
        return o instanceof Number n ? n.longValue() : 0;
    }

    static String bytes(final long bytes)
    {
        return io.blockmover.cli.Format.bytes(bytes);
    }

    static String rate(final long bps)
    {
        return String.format(Locale.ROOT, "%.1f MB/s", bps / 1e6);
    }

    static String seconds(final double s)
    {
        if (s < 0)
        {
            return "unknown";
        }
        if (s < 120)
        {
            return String.format(Locale.ROOT, "%.1f s", s);
        }
        if (s < 7200)
        {
            return String.format(Locale.ROOT, "%.1f min", s / 60);
        }
        return String.format(Locale.ROOT, "%.1f h", s / 3600);
    }

    static String esc(final String s)
    {
        return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\"", "&quot;");
    }

    private static final String CSS = """
        body { font-family: sans-serif; margin: 2em; color: #222; max-width: 60em; }
        h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
        table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
        th { background: #f2f2f2; } .meta { color: #666; font-size: 0.9em; }
        svg.chart { border: 1px solid #ddd; background: #fff; }
        .axis { stroke: #444; stroke-width: 1; } .grid { stroke: #e5e5e5; stroke-width: 1; }
        .label { font-size: 11px; fill: #444; } .bar { fill: #3b7dd8; }
        .series { fill: none; stroke-width: 2; }
        """;

    private static final String SCRIPT = """
        (function () {
          'use strict';
          var data = JSON.parse(document.getElementById('data').textContent);
          var NS = 'http://www.w3.org/2000/svg';
          var COLORS = ['#3b7dd8', '#d8573b', '#2e9e5b', '#9b59b6', '#c9a227', '#555555'];
          var W = 760, H = 280, M = {l: 70, r: 20, t: 20, b: 40};
          function el(name, attrs, parent) {
            var e = document.createElementNS(NS, name);
            for (var k in attrs) { e.setAttribute(k, attrs[k]); }
            if (parent) { parent.appendChild(e); }
            return e;
          }
          function text(svg, x, y, s, anchor) {
            var t = el('text', {x: x, y: y, 'class': 'label', 'text-anchor': anchor || 'start'}, svg);
            t.textContent = s;
          }
          function nice(v) {
            if (!(v > 0)) { return 1; }
            var p = Math.pow(10, Math.floor(Math.log10(v))), f = v / p;
            return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
          }
          function axes(svg, xmax, ymax, xlabel, ylabel, yfmt) {
            var pw = W - M.l - M.r, ph = H - M.t - M.b;
            for (var i = 0; i <= 4; i++) {
              var y = M.t + ph - ph * i / 4;
              el('line', {x1: M.l, y1: y, x2: M.l + pw, y2: y, 'class': 'grid'}, svg);
              text(svg, M.l - 6, y + 4, yfmt(ymax * i / 4), 'end');
            }
            for (var j = 0; j <= 5; j++) {
              var x = M.l + pw * j / 5;
              text(svg, x, M.t + ph + 16, (xmax * j / 5).toFixed(xmax < 5 ? 1 : 0), 'middle');
            }
            el('line', {x1: M.l, y1: M.t + ph, x2: M.l + pw, y2: M.t + ph, 'class': 'axis'}, svg);
            el('line', {x1: M.l, y1: M.t, x2: M.l, y2: M.t + ph, 'class': 'axis'}, svg);
            text(svg, M.l + pw / 2, H - 6, xlabel, 'middle');
            text(svg, 4, 12, ylabel, 'start');
            return {x: function (v) { return M.l + pw * v / xmax; },
              y: function (v) { return M.t + ph - ph * v / ymax; }};
          }
          function empty(svg, why) { text(svg, W / 2, H / 2, why, 'middle'); svg.setAttribute('data-drawn', '0'); }
          function mbps(v) { return (v / 1e6).toFixed(v < 1e7 ? 1 : 0); }

          function histogram() {
            var svg = document.getElementById('chart-latency');
            var samples = [], names = [];
            data.network.forEach(function (t) {
              if (t.rtt && t.rtt.samples_us) { samples = samples.concat(t.rtt.samples_us); names.push(t.transport); }
            });
            if (samples.length === 0) { return empty(svg, 'no round trips measured'); }
            samples.sort(function (a, b) { return a - b; });
            var lo = samples[0], hi = samples[Math.min(samples.length - 1, Math.floor(samples.length * 0.995))];
            if (hi <= lo) { hi = lo + 1; }
            var n = 40, width = (hi - lo) / n, counts = new Array(n).fill(0);
            samples.forEach(function (s) { counts[Math.min(n - 1, Math.max(0, Math.floor((s - lo) / width)))]++; });
            var ymax = nice(Math.max.apply(null, counts));
            var a = axes(svg, n, ymax, 'round trip, us (' + lo.toFixed(0) + ' to ' + hi.toFixed(0) + ', ' +
              names.join(' + ') + ')', 'pings', function (v) { return v.toFixed(0); });
            var drawn = 0;
            counts.forEach(function (c, i) {
              if (c === 0) { return; }
              el('rect', {'class': 'bar', x: a.x(i) + 1, y: a.y(c), width: Math.max(1, a.x(1) - a.x(0) - 2),
                height: a.y(0) - a.y(c), 'data-count': c}, svg);
              drawn++;
            });
            for (var j = 0; j <= 5; j++) {
              var lab = svg.querySelectorAll('text')[5 + j];
              if (lab) { lab.textContent = (lo + (hi - lo) * j / 5).toFixed(0); }
            }
            svg.setAttribute('data-drawn', String(drawn));
          }

          function lines(id, series, xlabel, ylabel, why) {
            var svg = document.getElementById(id);
            series = series.filter(function (s) { return s.points.length > 0; });
            if (series.length === 0) { return empty(svg, why); }
            var xmax = 0, ymax = 0;
            series.forEach(function (s) {
              s.points.forEach(function (p) { xmax = Math.max(xmax, p[0] / 1000); ymax = Math.max(ymax, p[1]); });
            });
            xmax = Math.max(xmax, 0.1); ymax = nice(ymax);
            var a = axes(svg, xmax, ymax, xlabel, ylabel, mbps), drawn = 0;
            series.forEach(function (s, i) {
              var d = s.points.map(function (p, k) {
                return (k ? 'L' : 'M') + a.x(p[0] / 1000).toFixed(1) + ' ' + a.y(p[1]).toFixed(1);
              }).join(' ');
              if (s.points.length === 1) { d += ' l 4 0'; }
              el('path', {'class': 'series', d: d, stroke: COLORS[i % COLORS.length],
                'data-points': s.points.length}, svg);
              var ly = M.t + 14 + 14 * i;
              el('line', {x1: W - M.r - 200, y1: ly - 4, x2: W - M.r - 185, y2: ly - 4,
                stroke: COLORS[i % COLORS.length], 'stroke-width': 3}, svg);
              text(svg, W - M.r - 180, ly, s.name);
              drawn += s.points.length;
            });
            svg.setAttribute('data-drawn', String(drawn));
          }

          histogram();
          lines('chart-bandwidth', data.network.filter(function (t) { return t.bandwidth_samples; })
            .map(function (t) { return {name: t.transport, points: t.bandwidth_samples}; }),
            'seconds', 'MB/s', 'no bandwidth measured');
          lines('chart-writes', data.volumes.map(function (v) { return {name: v.path, points: v.write_samples}; }),
            'seconds', 'MB/s written', 'no write samples');
        })();
        """;
}
