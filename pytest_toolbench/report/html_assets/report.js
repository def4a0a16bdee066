// Filters of the toolbench HTML report. Reads only attributes the report wrote; the filter
// state lives in the URL fragment (#outcome=failed&model=m1), so a filtered view is a link.
(function () {
  "use strict";
  var selects = Array.prototype.slice.call(document.querySelectorAll("select[data-filter]"));
  var search = document.getElementById("search");
  var cases = Array.prototype.slice.call(document.querySelectorAll("details.case"));

  function matches(element, key, value) {
    var have = element.getAttribute("data-" + key) || "";
    return key === "marks" ? have.split(" ").indexOf(value) >= 0 : have === value;
  }

  function apply() {
    var text = search.value.toLowerCase();
    var shown = 0;
    cases.forEach(function (element) {
      var ok = selects.every(function (select) {
        return !select.value || matches(element, select.getAttribute("data-filter"), select.value);
      });
      if (text && element.getAttribute("data-nodeid").toLowerCase().indexOf(text) < 0) ok = false;
      element.hidden = !ok;
      if (ok) shown += 1;
    });
    document.getElementById("shown").textContent = String(shown);
  }

  function remember() {
    var params = new URLSearchParams();
    selects.forEach(function (select) {
      if (select.value) params.set(select.getAttribute("data-filter"), select.value);
    });
    if (search.value) params.set("q", search.value);
    try { history.replaceState(null, "", "#" + params.toString()); } catch (e) { /* file:// */ }
  }

  var initial = new URLSearchParams(location.hash.replace(/^#/, ""));
  selects.forEach(function (select) {
    var value = initial.get(select.getAttribute("data-filter"));
    if (value !== null) select.value = value;
    select.addEventListener("change", function () { apply(); remember(); });
  });
  search.value = initial.get("q") || "";
  search.addEventListener("input", function () { apply(); remember(); });
  apply();
})();
