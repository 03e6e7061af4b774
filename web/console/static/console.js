// Geohub console: no framework, no inline script (the page's CSP forbids
// it). Elements opt in through data- attributes:
//   data-atualizar="/url" data-intervalo="ms"  refresh the element's HTML
//   data-tail="/ws/..."                        a websocket live tail
//   data-vivo="/ws/..."                        a live snapshot (class Vivo),
//     data-vivo-sem-pausa                        one that changes under the pointer
//   data-confirmar="question"                  confirm before submitting
//   data-menu                                  the narrow screen's menu button
//   data-alertas="/ws/..."                     the header's incident badge, live
"use strict";

// mouseOver tracks whether a mouse pointer rests over el: only a mouse's,
// since on a touch screen :hover sticks after a tap and would hold a list
// still for good. onLeave runs when it leaves.
function mouseOver(el, onLeave) {
  const state = { over: false };
  el.addEventListener("pointerenter", (e) => {
    if (e.pointerType === "mouse") state.over = true;
  });
  el.addEventListener("pointerleave", (e) => {
    if (e.pointerType !== "mouse") return;
    state.over = false;
    onLeave();
  });
  return state;
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-menu]").forEach(menuButton);
  document.querySelectorAll("[data-atualizar]").forEach(refresh);
  // The page's tail is reachable for the browser tests, which drop its
  // socket to check the resume.
  document.querySelectorAll("[data-tail]").forEach((el) => (window.__geohubTail = new Tail(el)));
  document.querySelectorAll("[data-vivo]").forEach((el) => (window.__geohubVivo = new Vivo(el)));
  document.querySelectorAll("[data-alertas]").forEach((el) => new Alertas(el));
  document.querySelectorAll("form[data-confirmar]").forEach((f) =>
    f.addEventListener("submit", (e) => {
      if (!confirm(f.dataset.confirmar)) e.preventDefault();
    }),
  );
  document.querySelectorAll("[data-copiar]").forEach((b) =>
    b.addEventListener("click", () => {
      const src = document.getElementById(b.dataset.copiar);
      navigator.clipboard?.writeText(src.textContent.trim());
      b.textContent = "Copiado";
    }),
  );
});

// menuButton opens and closes the menu on a narrow screen, where the CSS
// hides it behind the button; Escape closes it and gives the focus back.
function menuButton(btn) {
  const bar = btn.closest(".topo");
  const set = (open) => {
    bar.classList.toggle("aberto", open);
    btn.setAttribute("aria-expanded", String(open));
  };
  btn.addEventListener("click", () => set(!bar.classList.contains("aberto")));
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && bar.classList.contains("aberto")) {
      set(false);
      btn.focus();
    }
  });
}

function refresh(el) {
  const every = Number(el.dataset.intervalo || 15000);
  setInterval(async () => {
    if (document.hidden) return;
    try {
      // Not the person's activity: the session's idle time runs on.
      const res = await fetch(el.dataset.atualizar, { headers: { Accept: "text/html", "X-Geohub-Auto": "1" } });
      if (res.redirected && res.url.includes("/login")) return location.reload();
      if (res.ok) el.innerHTML = await res.text();
    } catch (_) {
      /* offline for a moment: the next tick tries again */
    }
  }, every);
}

// Tail keeps a websocket open and prepends the rows the server renders. It
// remembers the last sequence it showed and resumes from it after a
// reconnect, so no line is lost or repeated.
class Tail {
  constructor(el) {
    this.el = el;
    this.body = el.querySelector("tbody");
    this.status = el.querySelector("[data-tail-status]");
    this.pauseBtn = el.querySelector("[data-tail-pausa]");
    this.max = Number(el.dataset.max || 200);
    this.last = el.dataset.de || "0";
    this.paused = false;
    this.queue = [];
    this.wait = 500;
    if (this.pauseBtn) this.pauseBtn.addEventListener("click", () => this.togglePause());
    // The rows hold still under the pointer: new ones wait until it leaves.
    this.pointer = mouseOver(this.body, () => {
      if (!this.paused) this.flush();
    });
    this.connect();
  }

  held() {
    return this.paused || this.pointer.over;
  }

  flush() {
    this.queue.forEach((h) => this.add(h));
    this.queue = [];
    if (this.ws?.readyState === WebSocket.OPEN) this.show("ao vivo", "ao-vivo");
  }

  url() {
    const u = new URL(this.el.dataset.tail, location.href);
    u.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    u.searchParams.set("de", this.last);
    return u;
  }

  connect() {
    this.show("conectando…", "");
    const ws = new WebSocket(this.url());
    this.ws = ws;
    ws.onopen = () => {
      this.wait = 500;
      this.show("ao vivo", "ao-vivo");
    };
    ws.onmessage = (m) => {
      const msg = JSON.parse(m.data);
      if (BigInt(msg.seq) <= BigInt(this.last)) return;
      this.last = msg.seq;
      if (this.held()) {
        // Only the newest rows can be shown anyway.
        this.queue.push(msg.html);
        if (this.queue.length > this.max) this.queue.shift();
        if (!this.paused) this.show("pausado enquanto o ponteiro está sobre a lista", "pausado");
      } else {
        this.add(msg.html);
      }
    };
    ws.onclose = (e) => {
      if (e.code === 4401) return location.assign("/login?volta=" + encodeURIComponent(location.pathname + location.search));
      if (e.code === 4400) return this.show(e.reason || "filtro inválido", "caiu"); // the filter, not the network
      if (e.code === 4429) {
        // Too many tails open in this session: wait for other tabs to close.
        this.show("muitas abas ao vivo abertas; feche alguma", "caiu");
        setTimeout(() => this.connect(), 30000);
        return;
      }
      this.show("reconectando…", "caiu");
      setTimeout(() => this.connect(), this.wait);
      this.wait = Math.min(this.wait * 2, 10000);
    };
  }

  // drop closes the socket as a network failure would: it reconnects.
  drop() {
    this.ws?.close();
  }

  add(html) {
    const empty = this.body.querySelector(".vazio");
    if (empty) empty.remove();
    this.body.insertAdjacentHTML("afterbegin", html);
    const row = this.body.firstElementChild;
    row.classList.add("novo");
    setTimeout(() => row.classList.remove("novo"), 1500);
    while (this.body.children.length > this.max) this.body.lastElementChild.remove();
  }

  togglePause() {
    this.paused = !this.paused;
    this.pauseBtn.textContent = this.paused ? "Retomar" : "Pausar";
    if (!this.paused) this.flush();
  }

  show(text, cls) {
    if (!this.status) return;
    this.status.textContent = text;
    this.status.className = "tail-status " + cls;
  }
}

// Vivo keeps a websocket open and replaces the element's parts
// ([data-vivo-parte]) with the ones the server renders whenever what they
// show changed. Each message is the whole current state, so a reconnect
// simply gets the state anew: nothing to resume, nothing lost. Rows
// (tr[data-id]) that are new or whose data-versao changed are highlighted.
class Vivo {
  constructor(el) {
    this.el = el;
    this.status = el.querySelector("[data-tail-status]");
    this.wait = 500;
    // The list holds still under the pointer, so a click lands on the row
    // that was aimed at: changes wait until it leaves.
    this.pending = new Map();
    // A card that only shows state (data-vivo-sem-pausa) changes under
    // the pointer: its buttons stay where they are.
    this.pointer = "vivoSemPausa" in el.dataset ? { over: false } : mouseOver(el, () => this.flush());
    this.connect();
  }

  flush() {
    this.pending.forEach((html, name) => {
      const part = this.el.querySelector(`[data-vivo-parte="${name}"]`);
      if (part) this.replace(part, html);
    });
    if (this.pending.size > 0 && this.ws?.readyState === WebSocket.OPEN) this.show("ao vivo", "ao-vivo");
    this.pending.clear();
  }

  connect() {
    this.show("conectando…", "");
    const u = new URL(this.el.dataset.vivo, location.href);
    u.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(u);
    this.ws = ws;
    ws.onopen = () => {
      this.wait = 500;
      this.show("ao vivo", "ao-vivo");
    };
    ws.onmessage = (m) => {
      const partes = JSON.parse(m.data).partes || {};
      const hovered = this.pointer.over;
      Object.entries(partes).forEach(([name, html]) => {
        if (hovered) return this.pending.set(name, html);
        const part = this.el.querySelector(`[data-vivo-parte="${name}"]`);
        if (part) this.replace(part, html);
      });
      if (hovered) this.show("pausado enquanto o ponteiro está sobre a lista", "pausado");
    };
    ws.onclose = (e) => {
      if (e.code === 4401) return location.assign("/login?volta=" + encodeURIComponent(location.pathname + location.search));
      if (e.code === 4400) return this.show(e.reason || "filtro inválido", "caiu"); // the filter, not the network
      if (e.code === 4429) {
        this.show("muitas abas ao vivo abertas; feche alguma", "caiu");
        setTimeout(() => this.connect(), 30000);
        return;
      }
      this.show("reconectando…", "caiu");
      setTimeout(() => this.connect(), this.wait);
      this.wait = Math.min(this.wait * 2, 10000);
    };
  }

  // drop closes the socket as a network failure would: it reconnects.
  drop() {
    this.ws?.close();
  }

  replace(part, html) {
    const before = new Map([...part.querySelectorAll("tr[data-id]")].map((r) => [r.dataset.id, r.dataset.versao]));
    part.innerHTML = html;
    if (before.size === 0 && !part.querySelector("tr[data-id]")) return;
    part.querySelectorAll("tr[data-id]").forEach((row) => {
      if (before.get(row.dataset.id) === row.dataset.versao) return;
      row.classList.add("novo");
      setTimeout(() => row.classList.remove("novo"), 1500);
    });
  }

  show(text, cls) {
    if (!this.status) return;
    this.status.textContent = text;
    this.status.className = "tail-status " + cls;
  }
}

// Alertas keeps the header's incident badge and the page title current: a
// CAD that stops receiving shows on whatever page is open, and a tab in
// the background says so in its title. Each message is the whole state.
class Alertas {
  constructor(el) {
    this.el = el;
    this.base = el.dataset.titulo;
    this.wait = 1000;
    this.connect();
  }

  connect() {
    const u = new URL(this.el.dataset.alertas, location.href);
    u.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(u);
    ws.onopen = () => (this.wait = 1000);
    ws.onmessage = (m) => {
      const partes = JSON.parse(m.data).partes || {};
      if ("alertas" in partes) this.el.innerHTML = partes.alertas;
      if ("titulo" in partes) {
        const t = document.createElement("textarea");
        t.innerHTML = partes.titulo;
        document.title = t.value + this.base;
      }
    };
    ws.onclose = (e) => {
      if (e.code === 4401 || e.code === 4400) return; // the page's own tail, or the next click, goes to /login
      setTimeout(() => this.connect(), e.code === 4429 ? 30000 : this.wait);
      this.wait = Math.min(this.wait * 2, 10000);
    };
  }
}
