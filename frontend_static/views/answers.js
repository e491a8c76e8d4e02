// The five answers of a run (the `answers` route: tb_gradlens/analysis/answers.py),
// said as the server made them.  A sentence is a list of segments; a
// segment's role sets a name or a number apart (<strong class="gl-ROLE">),
// the details sit behind a hover or a disclosure.  The tab composes no
// answer of its own: `tb-gradlens report` prints the same sentences.

import {getJson} from '../api.js';
import {el} from '../dom.js';
import {filterParams} from './common.js';

/** The answers route for `run` ('' for every run) through the state's filters (variable regex, step range). */
export function answersFor(state, run = '') {
  return getJson('answers', {run, ...filterParams(state)});
}

/** One run's entry of an answers answer (null when absent). */
export function runAnswers(data, run) {
  return (data && data.runs || []).find((r) => r.run === run) || null;
}

/** {question id: answer} of a run's entry. */
export function byId(entry) {
  return Object.fromEntries(((entry && entry.answers) || []).map((a) => [a.id, a]));
}

/** The answer of one comparison of a run's entry (by any of its tags), else null. */
export function comparisonAnswer(entry, tag) {
  const found = ((entry && entry.comparisons) || []).find((c) => Object.values(c.tags || {}).includes(tag));
  return found ? found.answer : null;
}

/**
 * A sentence node: the segments of `said` (an answer, a section, a verdict),
 * roles as <strong class="gl-ROLE">; `data-verdict` its verdict; its details
 * on hover (title) unless `details` is false; `question`: the question first.
 */
export function sentence(said, {tag = 'p', className = '', details = true, title = '', question = false} = {}) {
  const node = el(tag, {class: `gl-answer ${className}`.trim(), dataset: {verdict: (said && said.verdict) || ''}});
  if (question && said && said.question) node.append(el('span', {class: 'gl-question', text: said.question}), ' ');
  for (const s of (said && said.sentence) || []) {
    node.append(s.role ? el('strong', {class: `gl-${s.role}`, text: s.text}) : s.text);
  }
  const lines = [title, ...(details && said && said.details ? said.details : [])].filter(Boolean);
  if (lines.length) node.title = lines.join('\n');
  return node;
}

/**
 * The five answers as a list: each question, its sentence, the line to paste
 * (with Copy) where there is one, its details behind a disclosure.
 */
export function answerList(entry) {
  const list = el('ol', {class: 'gl-answers', dataset: {run: entry.run}});
  for (const said of entry.answers) {
    const item = el('li', {class: 'gl-answer-item', dataset: {question: said.id, verdict: said.verdict}}, [
      el('span', {class: 'gl-question', text: said.question}), ' ',
      sentence(said, {tag: 'span', className: 'gl-answer-text', details: false}),
    ]);
    if (said.code) {
      const code = el('pre', {class: 'gl-advice-code gl-answer-code', text: said.code});
      item.appendChild(el('div', {class: 'gl-code-row'}, [code, copyButton(said.code, code)]));
    }
    if (said.details && said.details.length) {
      item.appendChild(el('details', {class: 'gl-answer-details'}, [el('summary', {text: 'Details'}),
        ...said.details.map((line) => el('p', {text: line}))]));
    }
    list.appendChild(item);
  }
  return list;
}

/** A Copy button for `text`: the clipboard, or (refused) the text selected for Ctrl+C. */
export function copyButton(text, target) {
  const button = el('button', {type: 'button', class: 'gl-tool gl-copy', text: 'Copy', title: 'Copy the code'});
  button.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = 'Copied';
    } catch (error) {
      const range = document.createRange();
      range.selectNodeContents(target);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      button.textContent = 'Selected: press Ctrl+C';
    }
    setTimeout(() => {
      button.textContent = 'Copy';
    }, 2500);
  });
  return button;
}

/**
 * The sentence of one record of the comparison (its gradients, layer outputs
 * or loss), as the server said it (analysis/answer_divergence.py `section`):
 * harmed, above its limit (not an alert), within; `rule` on hover before its
 * details.  No verdict of the tab's own: without the answer, 'unjudged'.
 */
export function sectionSentence(said, className, rule = '') {
  if (!said) return el('p', {class: `gl-headline ${className}`, dataset: {verdict: 'unjudged'}});
  return sentence(said, {className: `gl-headline ${className}`, title: rule});
}
