// Small DOM helpers. Every string goes in through textContent or a
// property/attribute setter, never through HTML parsing.

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
    else if (key === 'text') node.textContent = String(value);
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

/** Append nodes or strings (as text) to a parent. */
export function append(parent, children) {
  const list = Array.isArray(children) ? children : [children];
  for (const child of list) {
    if (child === null || child === undefined || child === false) continue;
    parent.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

/** Remove every child of a node. */
export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

/** A <select> whose options are [value, label] pairs (or plain strings). */
export function select(options, value, onChange, props = {}) {
  const node = el('select', props);
  for (const option of options) {
    const [v, label] = Array.isArray(option) ? option : [option, option];
    const item = el('option', {value: v, text: label});
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
