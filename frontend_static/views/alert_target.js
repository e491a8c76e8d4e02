// Where an alert's click lands: the view that shows its quantity over
// steps, with the rule at its first step (alert.view.step, else
// step_first), its variable or layer highlighted (view.row) and its
// section in focus.  An alert's view.name is the kind of its record.

export const VIEW_OF_KIND = {
  grad_stats: 'gradients', grad_histogram: 'gradients', update_stats: 'gradients',
  optimizer_step: 'gradients', nonfinite_replay: 'gradients', gradient_indices: 'gradients',
  divergence: 'divergence', activation_divergence: 'divergence', loss_comparison: 'divergence',
  dtypes: 'dtypes',
};

const DIVERGENCE_COLUMNS = new Set(['rel_l2', 'cosine', 'norm_ratio', 'max_abs', 'max_rel', 'ulp_rms',
  'sign_flip', 'flush_to_zero', 'nonfinite']);

/** The step an alert marks: view.step, else step_first (null if neither). */
export function alertStep(alert) {
  const view = alert.view || {};
  const step = view.step ?? alert.step_first;
  return step === undefined || step === null ? null : step;
}

/** State patch that opens the view showing an alert's evidence. */
export function alertTarget(alert) {
  const view = alert.view || {};
  const kind = view.name;
  const name = VIEW_OF_KIND[kind] || 'overview';
  const tag = view.tag || alert.tag || '';
  const step = alertStep(alert);
  const patch = {
    view: name, run: view.run || alert.run, focus: kind || '', alert: alert.id || '',
    row: view.row || (alert.variables && alert.variables[0]) || '',
    step: step === null ? '' : String(step), tag: '', utag: '', metric: '', dstep: '', zoom: '',
  };
  if (name === 'divergence') {
    patch.tag = tag;
    if (kind !== 'loss_comparison' && DIVERGENCE_COLUMNS.has(view.column)) patch.metric = view.column;
  } else if (kind === 'update_stats') {
    patch.utag = tag;
  } else if (name === 'gradients') {
    patch.tag = tag;
  } else if (name === 'dtypes') {
    patch.dstep = patch.step;
  }
  return patch;
}
