// Runs before the first paint (a classic script, no inline code): applies the
// saved theme choice so a dark page never flashes light.
(function () {
  try {
    var t = localStorage.getItem('cn-theme');
    if (t === 'light' || t === 'dark') document.documentElement.dataset.theme = t;
  } catch (e) { /* storage refused: follow the system */ }
}());
