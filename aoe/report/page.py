"""The report page: one self-contained HTML file (inline CSS, inline SVG charts, a little inline JS).

Nothing is fetched: no external script, stylesheet, font or image, so the file opens from disk and
can be mailed around. Every string from the model or the result file is HTML-escaped. The script
only sorts and filters the operator table; with `#selftest` in the address it also checks itself
(sorting, filtering, charts present) and writes the outcome into `#js-status` for headless tests.
"""
from __future__ import annotations

import html
import time
from collections.abc import Iterable
from typing import Any

from ..safetext import is_safe, safe_text
from ..tuning import gain_pct
from . import charts
from .data import ReportData

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2b45;color:#fff;padding:14px 28px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;opacity:.85}nav{padding:6px 28px;background:#e9edf3;font-size:13px}
nav a{margin-right:14px;color:#1d4e89}main{padding:4px 28px 40px;max-width:1280px}
section{background:#fff;border:1px solid #dde2ea;border-radius:6px;padding:10px 18px;margin:16px 0}
h2{font-size:16px;margin:4px 0 8px}.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{border:1px solid #dde2ea;border-radius:6px;padding:8px 14px;min-width:150px;background:#fafbfc}
.card b{display:block;font-size:18px}.card span{font-size:12px;color:#5a6474}
table{border-collapse:collapse;font-size:12.5px;width:100%}th,td{padding:3px 8px;border-bottom:1px solid #eceff3;text-align:left}
td{white-space:nowrap}td.name{white-space:normal;word-break:break-all;min-width:220px}td.unsafe{background:#fff3cd}td.unsafe::before{content:"⚠ "}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f0f3f7;position:sticky;top:0}
table.sortable th{cursor:pointer;user-select:none}th.asc::after{content:" \\25B2"}th.desc::after{content:" \\25BC"}
.kv td:first-child{color:#5a6474;width:220px}.muted{color:#6b7484;font-size:12.5px}
.bound{display:inline-block;width:9px;height:9px;border-radius:50%;margin-right:4px;vertical-align:baseline}
#op-search{padding:5px 8px;width:320px;margin:4px 0 8px;border:1px solid #c5cdd9;border-radius:4px}
.scroll{max-height:640px;overflow:auto;border:1px solid #eceff3}figure{margin:6px 0}.good{color:#17801f}.bad{color:#b3261e}
"""

# Sorting and filtering of the operator table; the self-test runs only with #selftest in the URL.
JS = r"""
(function(){
  var errs=[];window.addEventListener('error',function(e){errs.push(String(e.message));});
  function val(td,num){var v=td.getAttribute('data-v');if(v===null)v=td.textContent;return num?parseFloat(v):v.toLowerCase();}
  function sortBy(table,col,dir){
    var th=table.tHead.rows[0].cells[col],num=th.classList.contains('n'),body=table.tBodies[0];
    var rows=Array.prototype.slice.call(body.rows);
    rows.sort(function(a,b){var x=val(a.cells[col],num),y=val(b.cells[col],num);
      if(num){if(isNaN(x))x=-Infinity;if(isNaN(y))y=-Infinity;}return (x<y?-1:x>y?1:0)*dir;});
    var frag=document.createDocumentFragment();rows.forEach(function(r){frag.appendChild(r);});body.appendChild(frag);
    Array.prototype.forEach.call(table.tHead.rows[0].cells,function(c){c.classList.remove('asc','desc');});
    th.classList.add(dir>0?'asc':'desc');
  }
  function filter(table,q){
    q=q.trim().toLowerCase();var shown=0;
    Array.prototype.forEach.call(table.tBodies[0].rows,function(r){
      var hit=!q||r.getAttribute('data-s').indexOf(q)>=0;r.style.display=hit?'':'none';if(hit)shown++;});
    var c=document.getElementById(table.id+'-count');if(c)c.textContent=shown+' of '+table.tBodies[0].rows.length+' shown';
    return shown;
  }
  Array.prototype.forEach.call(document.querySelectorAll('table.sortable'),function(table){
    Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th,i){
      th.addEventListener('click',function(){sortBy(table,i,th.classList.contains('desc')?1:-1);});});
  });
  var box=document.getElementById('op-search'),tab=document.getElementById('op-table');
  if(box&&tab){box.addEventListener('input',function(){filter(tab,box.value);});filter(tab,'');}
  if(location.hash==='#selftest'){
    var out={errors:errs,charts:{}};
    Array.prototype.forEach.call(document.querySelectorAll('svg.chart-svg'),function(s){
      var r=s.getBoundingClientRect();out.charts[s.getAttribute('data-chart')]=
        {paths:s.querySelectorAll('path,use').length,texts:s.querySelectorAll('text').length,w:Math.round(r.width),h:Math.round(r.height)};});
    if(tab){
      var n=tab.tBodies[0].rows.length,col=-1;
      Array.prototype.forEach.call(tab.tHead.rows[0].cells,function(c,i){if(c.getAttribute('data-k')==='default')col=i;});
      sortBy(tab,col,-1);var ok=true,prev=Infinity;
      Array.prototype.forEach.call(tab.tBodies[0].rows,function(r){var v=parseFloat(r.cells[col].getAttribute('data-v'));if(v>prev)ok=false;prev=v;});
      out.sorted_desc=ok;out.rows=n;
      out.filter_none=filter(tab,'zz-no-such-operator-zz');
      var first=tab.tBodies[0].rows[0].getAttribute('data-s').split(' ')[0];
      out.filter_first=filter(tab,first);filter(tab,'');
    }
    var st=document.getElementById('js-status');st.textContent=JSON.stringify(out);st.setAttribute('data-done','1');
  }
})();
"""

def E(text: str) -> str:
    """Text for the page: HTML-escaped, and visibly safe (`safe_text`: no bidi override, zero-width or
    control character from a model file reaches the page raw)."""
    return html.escape(safe_text(text, keep_newlines=True))


def _us(v: float) -> str:
    return f"{v:,.3f}"


def _cards(items: Iterable[tuple[str, str]]) -> str:
    return '<div class="cards">' + "".join(f'<div class="card"><b>{E(v)}</b><span>{E(k)}</span></div>'
                                           for k, v in items) + "</div>"


def _kv(rows: Iterable[tuple[str, Any]]) -> str:
    return '<table class="kv">' + "".join(f"<tr><td>{E(str(k))}</td><td>{E(str(v))}</td></tr>" for k, v in rows) + "</table>"


def _dot(bound: str) -> str:
    return f'<span class="bound" style="background:{charts.PIPE_COLOURS.get(bound, "#000")}"></span>{E(bound)}'


def _op_table(data: ReportData) -> str:
    head = [("#", "n", "i"), ("operator", "", "name"), ("type", "", "type"), ("default µs", "n", "default"),
            ("tuned µs", "n", "tuned"), ("saved µs", "n", "saved"), ("speed-up", "n", "speedup"),
            ("strategy", "", "source"), ("bound default → tuned", "", "bound"), ("FLOP/byte", "n", "ai"),
            ("TFLOP/s tuned", "n", "tflops"), ("kinds", "", "kinds")]
    out = ['<table id="op-table" class="sortable"><thead><tr>']
    out += [f'<th class="{c}" data-k="{k}">{E(h)}</th>' for h, c, k in head]
    out.append("</tr></thead><tbody>")
    for i, r in enumerate(data.ops):
        c = data.cases[r.case]
        sp = gain_pct(r.default_us, r.tuned_us)
        cls = "good" if r.saved_us > 1e-9 else ("bad" if r.saved_us < -1e-9 else "")
        search = f"{r.name} {r.op_type} {r.source} {' '.join(r.kinds)}".lower()
        mark = '"' if is_safe(r.name) else ' unsafe" title="this name holds invisible or control characters, shown as escapes"'
        out.append(
            f'<tr data-s="{E(search)}"><td class="n" data-v="{i}">{i + 1}</td><td class="name{mark}>{E(r.name)}</td>'
            f"<td>{E(r.op_type)}</td><td class=\"n\" data-v=\"{r.default_us:.6g}\">{_us(r.default_us)}</td>"
            f'<td class="n" data-v="{r.tuned_us:.6g}">{_us(r.tuned_us)}</td>'
            f'<td class="n {cls}" data-v="{r.saved_us:.6g}">{_us(r.saved_us)}</td>'
            f'<td class="n" data-v="{sp:.6g}">{sp:.2f}%</td><td>{E(r.source)}'
            f"{' (' + E(c.tuned.label) + ')' if c.tuned.label != 'default' else ''}</td>"
            f"<td>{_dot(c.default.bound)} → {_dot(c.tuned.bound)}</td>"
            f'<td class="n" data-v="{c.tuned.intensity:.6g}">{c.tuned.intensity:.1f}</td>'
            f'<td class="n" data-v="{c.tuned.tflops:.6g}">{c.tuned.tflops:.2f}</td>'
            f"<td>{E(', '.join(r.kinds))}{' (' + E(r.update) + ')' if r.update else ''}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _subgraph_table(data: ReportData) -> str:
    out = [('<table id="sg-table" class="sortable"><thead><tr><th>repo_key</th><th>kernels</th>'
           '<th class="n">instances</th><th class="n">unfused µs</th><th class="n">default fusion µs</th>'
           '<th class="n">tuned µs</th><th class="n">saved µs (all)</th><th>kernels default → tuned</th>'
           "<th>in bank</th></tr></thead><tbody>")]
    for s in sorted(data.subgraphs, key=lambda s: -s.gain_us):
        out.append(f"<tr><td>{E(s.key)}</td><td>{E(' '.join(s.op_types))}</td><td class=\"n\">{s.instances}</td>"
                   f'<td class="n" data-v="{s.unfused_us:.6g}">{_us(s.unfused_us)}</td>'
                   f'<td class="n" data-v="{s.default_us:.6g}">{_us(s.default_us)}</td>'
                   f'<td class="n" data-v="{s.tuned_us:.6g}">{_us(s.tuned_us)}</td>'
                   f'<td class="n" data-v="{s.gain_us:.6g}">{_us(s.gain_us)}</td>'
                   f"<td>{len(s.default_groups)} → {len(s.tuned_groups)}</td><td>{'yes' if s.in_bank else 'no'}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def render(data: ReportData, *, top: int = 8) -> str:
    """The whole report as one HTML string."""
    charts.require_matplotlib()
    soc = data.soc
    title = f"aoe {data.kind.upper()} report: {data.tuning_name or data.model}"
    unit_total = "ms"
    cards = [("model before" + (" (default fusion)" if data.kind == "sgat" else " (CANN defaults)"),
              f"{data.model_default_us / 1000:.3f} {unit_total}"),
             ("model after (with the banks)", f"{data.model_tuned_us / 1000:.3f} {unit_total}"),
             ("improvement", data.improvement), ("status", data.status),
             (("operators priced", str(len(data.ops))) if data.kind == "opat" else
              ("distinct subgraphs", str(len(data.subgraphs)))), ("skipped", str(len(data.skipped)))]
    if data.model_unfused_us is not None:
        cards.insert(2, ("unfused (every op its own kernel)", f"{data.model_unfused_us / 1000:.3f} {unit_total}"))
    has_ops = bool(data.cases)   # an SGAT run's record holds subgraphs, not operator kernels
    roof, left_out = charts.roofline(data) if has_ops else ("", 0)
    parts = [(f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{E(title)}</title>"
             f"<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><style>{CSS}</style></head><body>"),
             (f"<header><h1>{E(title)}</h1><p>{E(data.model)} on the simulated {E(soc.name)} · task {E(data.task)} · "
             f"generated {time.strftime('%Y-%m-%d %H:%M:%S')}</p></header>"),
             '<nav><a href="#summary">summary</a>'
             + ('<a href="#roofline">roofline</a><a href="#pipes">pipes</a>' if has_ops else "")
             + '<a href="#waterfall">waterfall</a>' + ('<a href="#fusion">fusion map</a>' if data.kind == "sgat" else "")
             + ('<a href="#operators">operators</a>' if has_ops else "") + '</nav><main>']
    counters = [(k, v) for k, v in data.counters.items()]
    socrows = [("SoC", soc.name), ("Cube / Vector cores", f"{soc.cube_cores} / {soc.vector_cores}"),
               ("clock", f"{soc.freq_mhz:.0f} MHz"), ("HBM", f"{soc.hbm_gbps:.0f} GB/s"),
               ("L2", f"{soc.l2 >> 20} MiB, {soc.l2_gbps:.0f} GB/s"),
               ("Cube peak (fp16)", f"{soc.peak_flops['float16'] / 1e12:.0f} TFLOP/s"),
               ("L1 / UB / L0C", f"{soc.l1 >> 10} / {soc.ub >> 10} / {soc.l0c >> 10} KiB")]
    parts.append(f'<section id="summary"><h2>Summary</h2>{_cards(cards)}'
                 f'<div style="display:flex;gap:24px;flex-wrap:wrap;margin-top:10px">'
                 f"<div><h3>Job</h3>{_kv([('tuning_name', data.tuning_name), ('model', data.model), ('kind', data.kind.upper()), ('tuning time (s)', data.tuning_seconds if data.tuning_seconds is not None else '—')])}"
                 + "</div>"
                 f"<div><h3>Counters</h3>{_kv(counters) if counters else '<p class=muted>none</p>'}</div>"
                 + (f"<div><h3>Bank hits by origin</h3>{_kv(list(data.hits.items()))}</div>" if data.hits else "")
                 + f"<div><h3>SoC</h3>{_kv(socrows)}</div></div>"
                 + ("<ul class=\"muted\">" + "".join(f"<li>{E(s)}</li>" for s in data.settings) + "</ul>" if data.settings else "")
                 + "".join(f'<p class="muted">note: {E(n)}</p>' for n in data.notes) + "</section>")
    if has_ops:
        parts += _operator_sections(data, roof, left_out, top)
    parts.append(f'<section id="waterfall"><h2>Where the time went</h2><figure>{charts.waterfall(data)}</figure>'
                 "</section>")
    if data.kind == "sgat":
        parts.append(f'<section id="fusion"><h2>Fusion map</h2><figure>{charts.fusion_map(data)}</figure>'
                     "<p class=\"muted\">The distinct subgraphs that gained most: each box is a kernel (red edge: Cube, "
                     "green: Vector), a shaded group runs as one fused kernel, solid arrows are fused edges, dashed ones "
                     f"go through HBM.</p><figure>{charts.subgraph_gains(data)}</figure>"
                     f'<div class="scroll">{_subgraph_table(data)}</div></section>')
    if has_ops:
        parts.append(_operators(data))
    elif data.skipped:
        parts.append(_skipped(data))
    parts.append(f'</main><pre id="js-status" hidden></pre><script>{JS}</script></body></html>')
    return "".join(parts)


def _skipped(data: ReportData) -> str:
    return (f'<p class="muted">{len(data.skipped)} operators could not be priced and are in no total: '
            + E(", ".join(f"{s['op']} ({s['reason']})" for s in data.skipped[:20]))
            + (" …" if len(data.skipped) > 20 else "") + "</p>")


def _operators(data: ReportData) -> str:
    return ('<section id="operators"><h2>Operators</h2><input id="op-search" type="search" '
            'placeholder="filter by name, type, source or kind" aria-label="filter operators">'
            ' <span id="op-table-count" class="muted"></span>'
            f'<div class="scroll">{_op_table(data)}</div>' + (_skipped(data) if data.skipped else "") + "</section>")


def _operator_sections(data: ReportData, roof: str, left_out: int, top: int) -> list[str]:
    parts: list[str] = []
    parts.append(f'<section id="roofline"><h2>Roofline</h2><figure>{roof}</figure><p class="muted">Each point is a '
                 "distinct operator case (identical operators share one, the size grows with its share of the model's "
                 "time); hollow at CANN's default strategy, filled at the strategy in use, coloured by the pipe that "
                 "bounds it. x counts FLOPs per byte moved from HBM; the L2 line is the roof an operator fed from L2 "
                 f"would meet. {left_out} cases without FLOPs or HBM traffic are not drawn.</p></section>")
    parts.append(f'<section id="pipes"><h2>Pipe breakdown of the top {top} cases</h2><figure>{charts.pipes(data, top)}'
                 "</figure><p class=\"muted\">The distinct operator cases taking the most time: busy time of each pipe "
                 "of the AI Core with the default strategy and with the tuned one, in % of the default wall time, "
                 "against the wall time (black tick). Pipes overlap; the one with the most busy time bounds the kernel."
                 "</p></section>")
    return parts


__all__ = ["render"]
