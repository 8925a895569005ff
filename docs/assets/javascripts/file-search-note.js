/* Opened from disk (file://), the site's links work, but the search box may stay on
   "Initializing search" in browsers that keep a page's frames from talking to each other. Say
   plainly how to get search instead of leaving the box waiting. */
(() => {
  if (location.protocol !== "file:") return;
  const note =
    "Search needs the site served: run `make docs-serve` and open http://127.0.0.1:8000 " +
    "(or `python -m http.server -d site`).";
  const check = () => {
    const meta = document.querySelector(".md-search-result__meta");
    if (meta && /Initializing/.test(meta.textContent)) meta.textContent = note;
  };
  addEventListener("load", () => setTimeout(check, 3000));
})();
