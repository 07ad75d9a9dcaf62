// Trainyard's pages: live parts and the log. Plain script, no library.
"use strict";

// Elements with data-live="URL" are replaced by what the URL's event
// stream sends: the server renders them again when they change.
function live(el) {
  const src = new EventSource(el.dataset.live);
  src.onmessage = (e) => { el.innerHTML = e.data; };
  src.addEventListener("problem", (e) => {
    src.close();
    const p = document.createElement("p");
    p.className = "problem";
    p.setAttribute("role", "alert");
    p.textContent = e.data;
    el.prepend(p);
  });
  src.addEventListener("again", () => { src.close(); live(el); });
}

// The log: the last lines, then each new one as it is written.
function followLog(pre) {
  const state = document.getElementById("log-state");
  const follow = document.getElementById("log-follow");
  const src = new EventSource(pre.dataset.log);
  let lines = 0;
  const maxLines = 20000;
  src.onopen = () => {
    if (state && !lines) state.textContent = "Following: lines appear as they are written.";
  };
  src.onmessage = (e) => {
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.append(e.data + "\n");
    lines++;
    while (lines > maxLines && pre.firstChild) {
      pre.removeChild(pre.firstChild);
      lines--;
    }
    if (follow && follow.checked && atEnd) pre.scrollTop = pre.scrollHeight;
    if (state) state.textContent = "Following: new lines appear as they are written.";
  };
  src.addEventListener("end", () => {
    src.close();
    if (state) state.textContent = lines ? "End of the log." : "The log is empty.";
    pre.dataset.done = "true";
  });
  src.addEventListener("problem", (e) => {
    src.close();
    if (state) state.textContent = e.data;
  });
}

// The sign-in page takes a token from the link `trainyard ui` prints
// (#token=…): the fragment never reaches a server or its logs.
function signinFromLink() {
  const m = location.hash.match(/^#token=([A-Za-z0-9_\-]+)$/);
  const field = document.getElementById("token");
  if (!m || !field) return;
  history.replaceState(null, "", location.pathname + location.search);
  field.value = m[1];
  field.form.submit();
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-live]").forEach(live);
  document.querySelectorAll("pre[data-log]").forEach(followLog);
  signinFromLink();
  document.querySelectorAll("button[data-action=cancel]").forEach((b) => {
    b.form.addEventListener("submit", (e) => {
      if (!confirm("Cancel this job? Its running attempt is stopped.")) e.preventDefault();
    });
  });
});
