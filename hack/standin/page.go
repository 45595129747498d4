package standin

// pageHTML is what a browser gets: the workspace's facts and a terminal. The script polls the same
// URL for JSON every 2 s, so an upgrade visibly moves the page to the new pod and version, and
// reconnects the terminal whenever the proxy closes it (it does when the pod it was pinned to goes
// away), so the new banner shows the new version.
const pageHTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.DisplayName}} · nogoo9 demo workspace</title>
<style>
body { font: 15px/1.5 system-ui, sans-serif; margin: 2em auto; max-width: 52em; padding: 0 1em; color: #222; }
h1 { font-size: 1.4em; margin-bottom: .2em; }
.note { color: #666; font-size: .9em; margin-top: 0; }
table { border-collapse: collapse; margin: 1em 0; }
th { text-align: left; padding: .2em 1.2em .2em 0; color: #555; font-weight: normal; }
td { font-family: ui-monospace, monospace; }
td.changed { background: #fff3b0; transition: background 2s; }
#term { background: #111; color: #ddd; font: 13px/1.4 ui-monospace, monospace; padding: .8em; height: 16em; overflow-y: auto; white-space: pre-wrap; margin: 0; }
#line { width: 100%; box-sizing: border-box; font: 13px ui-monospace, monospace; padding: .4em; }
</style>
</head>
<body>
<h1>Workspace <span id="f-display">{{.DisplayName}}</span></h1>
<p class="note">Served by nogoo9's demo stand-in (hack/standin) on the pod's IP, in place of the container kwok does not run.</p>
<table>
<tr><th>workspace id</th><td id="f-workspace">{{.Workspace}}</td></tr>
<tr><th>owner</th><td id="f-owner">{{.Owner}}</td></tr>
<tr><th>pod</th><td id="f-pod">{{.Pod}}</td></tr>
<tr><th>template</th><td id="f-template">{{.Template}}</td></tr>
<tr><th>template version</th><td id="f-templateVersion">{{.TemplateVersion}}</td></tr>
<tr><th>port</th><td id="f-role">{{.Role}} ({{.Addr}})</td></tr>
</table>
<h2>Terminal</h2>
<pre id="term"></pre>
<input id="line" placeholder="type a line and press Enter: the pod echoes it" autocomplete="off">
<script>
(function () {
  var term = document.getElementById("term"), line = document.getElementById("line"), ws = null;
  function out(s) { term.textContent += s + "\n"; term.scrollTop = term.scrollHeight; }
  function set(id, v) {
    var el = document.getElementById("f-" + id);
    if (el && el.textContent !== v) { el.textContent = v; el.className = "changed"; setTimeout(function () { el.className = ""; }, 2000); }
  }
  function poll() {
    fetch(location.href, {headers: {"Accept": "application/json"}, cache: "no-store"})
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (j) {
        if (!j) return;
        set("display", j.name || j.workspace); set("workspace", j.workspace); set("owner", j.owner);
        set("pod", j.pod); set("template", j.template); set("templateVersion", j.templateVersion);
        set("role", j.role + " (" + j.addr + ")");
        document.title = (j.name || j.workspace) + " · nogoo9 demo workspace";
      })
      .catch(function () {})
      .then(function () { setTimeout(poll, 2000); });
  }
  function connect() {
    var u = new URL(location.href); u.protocol = u.protocol === "https:" ? "wss:" : "ws:"; u.hash = "";
    ws = new WebSocket(u.toString());
    ws.onmessage = function (e) { out(e.data); };
    ws.onclose = function (e) {
      out("-- connection closed (code " + e.code + "); reconnecting in 1 s");
      ws = null; setTimeout(connect, 1000);
    };
  }
  line.addEventListener("keydown", function (e) {
    if (e.key !== "Enter" || !ws || ws.readyState !== 1) return;
    out("> " + line.value); ws.send(line.value); line.value = "";
  });
  setTimeout(poll, 2000);
  connect();
})();
</script>
</body>
</html>
`
