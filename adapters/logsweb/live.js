// Task Logs follows new lines: /live says the number of the newest stored
// line whenever it changes; on news the page fetches itself again and
// swaps in the parts marked data-swap. On an older page of the list it
// only says that newer events came, so the page being read stays put.
"use strict";
(function () {
  const root = document.querySelector("[data-latest]");
  if (!root || !window.EventSource) {
    return;
  }
  // What the page says of the stream. The place it says it (#live) sits
  // in a part that is swapped, whose fresh copy is empty: so it is looked
  // up each time, and said again after a swap.
  let said = "";
  function say(text) {
    said = text;
    const el = document.getElementById("live");
    if (el) {
      el.textContent = text;
    }
  }
  let seen = root.dataset.latest;
  let busy = false;
  let again = false;

  async function refresh() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      const resp = await fetch(location.href, { headers: { Accept: "text/html" } });
      if (resp.ok) {
        const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
        for (const el of document.querySelectorAll("[data-swap]")) {
          const fresh = doc.getElementById(el.id);
          if (fresh) {
            el.replaceWith(document.adoptNode(fresh));
          }
        }
        say(said);
      }
    } finally {
      busy = false;
      if (again) {
        again = false;
        refresh();
      }
    }
  }

  const stream = new EventSource("/live");
  stream.addEventListener("latest", (e) => {
    if (e.data === seen) {
      return;
    }
    seen = e.data;
    if (root.dataset.follow === "yes") {
      refresh();
    } else {
      const news = document.getElementById("news");
      if (news) {
        news.hidden = false;
      }
    }
  });
  stream.onopen = () => say("live: new lines appear as they are pulled");
  stream.onerror = () => say("not live: reconnecting to logs serve…");
})();
