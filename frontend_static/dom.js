// Small DOM helpers. Every string goes in through textContent or a
// property/attribute setter, never through HTML parsing.

// Bidirectional controls: embeddings, overrides (U+202A-202E), isolates
// (U+2066-2069), marks (U+200E/F, U+061C).  A name holding one must not reorder
// the text shown after it: a right-to-left override left open in a tag would
// reverse the rest of its label.
const BIDI = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

/**
 * ``text`` as a bidirectional isolate (FSI ... PDI) when it holds a bidi
 * control, else unchanged: whatever it opens is closed at its end, so a user
 * string can reorder only itself, never the text after it.
 * @param {*} text a user string (a run, tag, variable or layer name)
 */
export function isolate(text) {
  const s = String(text);
  return BIDI.test(s) ? `\u2068${s}\u2069` : s;
}

/**
 * Create an element.
 * @param {string} tag element name
 * @param {Object} [props] attributes ('class', 'text', 'on*' handlers, 'dataset', other attributes)
 * @param {Array|Node|string} [children] nodes or strings (strings become text nodes)
 */
export function el(tag, props = {}, children = []) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') setText(node, value);
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') {
      node.addEventListener(key.slice(2), value);
    } else if (key === 'value') node.value = value;
    else if (key === 'checked') node.checked = Boolean(value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  append(node, children);
  return node;
}

// Text holding a run of this many characters without a space (a long run,
// tag or variable name) is shown in at most three lines (.gl-long), in full
// on hover (title) and in the DOM: a 4,096-character name must not push the
// view off the screen.
const LONG_NAME = /\S{120}/;

function setText(node, value) {
  const text = String(value);
  const long = LONG_NAME.test(text);
  if (long && (node.tagName === 'TD' || node.tagName === 'TH')) {
    node.appendChild(el('span', {text}));
    return;
  }
  node.textContent = text;
  if (BIDI.test(text)) node.style.unicodeBidi = 'isolate';
  if (long && node.tagName !== 'OPTION') {
    node.classList.add('gl-long');
    node.title = text;
  }
}

/** Append nodes or strings (as text) to a parent. */
export function append(parent, children) {
  const list = Array.isArray(children) ? children : [children];
  for (const child of list) {
    if (child === null || child === undefined || child === false) continue;
    if (child instanceof Node) parent.appendChild(child);
    // A string holding a bidi control is its own isolate (<bdi>): the text stays as it is.
    else if (BIDI.test(String(child))) parent.appendChild(el('bdi', {text: child}));
    else if (LONG_NAME.test(String(child))) parent.appendChild(el('span', {text: child}));
    else parent.appendChild(document.createTextNode(String(child)));
  }
  return parent;
}

/** Remove every child of a node. */
export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

/** A <select> whose options are [value, label(, title)] (or plain strings); a title is the option's hover line. */
export function select(options, value, onChange, props = {}) {
  const node = el('select', props);
  for (const option of options) {
    const [v, label, title] = Array.isArray(option) ? option : [option, option];
    const item = el('option', {value: v, text: label, title: title || undefined});
    if (String(v) === String(value)) item.selected = true;
    node.appendChild(item);
  }
  node.addEventListener('change', () => onChange(node.value));
  return node;
}

/** A labelled control: <label>text control</label>. */
export function labelled(text, control) {
  return el('label', {class: 'gl-field'}, [el('span', {text}), control]);
}

/** Message block for loading, empty and error states. */
export function message(kind, text) {
  const props = {class: `gl-message gl-${kind}`, text};
  if (kind === 'error') props.role = 'alert';
  if (kind === 'loading') props['aria-busy'] = 'true';
  return el('p', props);
}

/** A number input calling onChange(value) on change. */
export function numberInput(value, min, onChange, className) {
  const input = el('input', {type: 'number', min, step: 1, value, class: className});
  input.addEventListener('change', () => onChange(input.value));
  return input;
}

/** A checkbox calling onChange(checked) on change. */
export function checkbox(checked, onChange, className) {
  const input = el('input', {type: 'checkbox', checked, class: className});
  input.addEventListener('change', () => onChange(input.checked));
  return input;
}
