// A sortable table. Headers are buttons (keyboard: Tab + Enter); rows with
// an onSelect handler are focusable and selected with Enter or a click.
// Every cell is text.

import {el} from './dom.js';
import {fmt, num} from './format.js';

/**
 * Create a table.
 * @param {Object} o
 *   columns: [{key, label, numeric?, format?(value, row), title?}]
 *   rows: objects keyed by column key
 *   sortKey, descending: initial order (default: as given)
 *   sortValue(row, key): value used to sort (default row[key])
 *   onSelect(row): row activation; rowClass(row): extra class; caption
 *   cellTitle(row, key): a cell's title (hover text); rowKey(row): data-key of a row
 *   maxRows: show at most this many rows (after sorting); `showAll` adds a button that shows the rest
 */
export function table(o) {
  let sortKey = o.sortKey || null;
  let descending = o.descending !== undefined ? o.descending : true;
  let limit = o.maxRows || 0;
  const node = el('table', {class: 'gl-table'});
  if (o.caption) node.appendChild(el('caption', {text: o.caption}));
  const thead = el('thead');
  const tbody = el('tbody');
  node.append(thead, tbody);

  const sortValue = o.sortValue || ((row, key) => row[key]);
  const render = () => {
    const headRow = el('tr');
    for (const column of o.columns) {
      const active = column.key === sortKey;
      const arrow = active ? (descending ? ' ▼' : ' ▲') : '';
      const button = el('button', {
        type: 'button', class: 'gl-sort', text: column.label + arrow,
        title: column.title, onclick: () => {
          descending = active ? !descending : true;
          sortKey = column.key;
          render();
        },
      });
      headRow.appendChild(el('th', {
        scope: 'col', class: column.numeric ? 'gl-num' : '',
        'aria-sort': active ? (descending ? 'descending' : 'ascending') : undefined,
      }, [button]));
    }
    thead.replaceChildren(headRow);
    let rows = [...o.rows];
    if (sortKey) {
      const column = o.columns.find((c) => c.key === sortKey);
      rows.sort((a, b) => compare(sortValue(a, sortKey), sortValue(b, sortKey), column && column.numeric));
      if (descending) rows.reverse();
    }
    const total = rows.length;
    if (limit && total > limit) rows = rows.slice(0, limit);
    tbody.replaceChildren(...rows.map((row) => bodyRow(row)));
    if (o.showAll && limit && total > limit) {
      const more = el('button', {type: 'button', class: 'gl-tool gl-show-all', text: `Show all ${total} rows`,
        onclick: () => {
          limit = 0;
          render();
        }});
      tbody.appendChild(el('tr', {class: 'gl-more-row'}, [el('td', {colspan: o.columns.length}, [
        `${limit} of ${total} shown. `, more])]));
    }
  };

  const bodyRow = (row) => {
    const classes = [o.rowClass ? o.rowClass(row) : '', o.onSelect ? 'gl-selectable' : ''];
    const tr = el('tr', {class: classes.filter(Boolean).join(' ')});
    if (o.rowKey) tr.dataset.key = o.rowKey(row);
    for (const column of o.columns) {
      const value = row[column.key];
      const missing = value === undefined || value === null || value === '';
      const text = column.format ? column.format(value, row)
        : column.numeric ? (missing ? '' : fmt(value)) : value;
      const props = {class: column.numeric ? 'gl-num' : '', text: text ?? ''};
      if (column.numeric && !missing) {
        props['data-value'] = String(num(value));
      }
      const title = o.cellTitle ? o.cellTitle(row, column.key) : '';
      if (title) props.title = title;
      tr.appendChild(el('td', props));
    }
    if (o.onSelect) {
      tr.tabIndex = 0;
      tr.addEventListener('click', () => o.onSelect(row));
      tr.addEventListener('keydown', (event) => {
        if (event.key === 'Enter' || event.key === ' ') {
          event.preventDefault();
          o.onSelect(row);
        }
      });
    }
    return tr;
  };
  render();
  return node;
}

/** Order: numbers ascending, NaN above every number (descending puts it on top); else text. */
function compare(a, b, numeric) {
  if (numeric) {
    const x = num(a);
    const y = num(b);
    const xn = Number.isNaN(x);
    const yn = Number.isNaN(y);
    if (xn || yn) return xn === yn ? 0 : xn ? 1 : -1;
    return x - y;
  }
  return String(a ?? '').localeCompare(String(b ?? ''));
}
