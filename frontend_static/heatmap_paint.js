// Painting a rows x steps heatmap into an ImageData, one pixel per (row,
// pixel column), placed by step value: a logged step covers the columns up
// to the next logged step, so records logged every 10 steps and zoomed
// ranges line up with the line charts' step axis.  When a column holds
// several steps it shows the largest value, and NaN/Inf wins over any
// number (a spike or a NaN is never averaged away).

/**
 * For each of `columns` pixel columns over the step domain [d0, d1], the
 * index range [start, end) of the sorted `steps` it shows (end = start: empty).
 * A column with no step of its own shows the last step before it, up to
 * `holdUntil` (the step where the last logged value stops being shown).
 */
export function columnSpans(steps, d0, d1, columns, holdUntil = Infinity) {
  const start = new Int32Array(columns);
  const end = new Int32Array(columns);
  const width = (d1 - d0) / columns;
  let i = 0;
  for (let b = 0; b < columns; b++) {
    const lo = d0 + b * width;
    const hi = lo + width;
    while (i < steps.length && steps[i] < lo) i++;
    let j = i;
    while (j < steps.length && steps[j] < hi) j++;
    if (j > i) {
      start[b] = i;
      end[b] = j;
    } else if (i > 0 && lo < (i < steps.length ? steps[i] : holdUntil)) {
      start[b] = i - 1;
      end[b] = i;
    }
  }
  return {start, end};
}

/**
 * Paint values[row][stepIndex] into an ImageData of columns x rows.
 * colorOf(row, v, out) writes out[0..3] (RGBA) for a value (v is NaN when
 * the column holds a NaN/Inf) and returns false to leave the cell empty.
 */
export function paintImage(values, spans, columns, colorOf, empty) {
  const nRows = values.length;
  const image = new ImageData(Math.max(columns, 1), Math.max(nRows, 1));
  const data = image.data;
  const out = [0, 0, 0, 255];
  for (let r = 0; r < nRows; r++) {
    const row = values[r];
    let offset = r * columns * 4;
    for (let b = 0; b < columns; b++, offset += 4) {
      const s0 = spans.start[b];
      const s1 = spans.end[b];
      let color = null;
      if (s1 > s0) {
        let best = -Infinity;
        let bad = false;
        for (let s = s0; s < s1; s++) {
          const v = row[s];
          if (v > best && v !== Infinity) best = v;
          else if (v !== v || v === Infinity || v === -Infinity) bad = true;
        }
        out[3] = 255;
        if (colorOf(r, bad ? NaN : best, out)) color = out;
      }
      color = color || empty;
      data[offset] = color[0];
      data[offset + 1] = color[1];
      data[offset + 2] = color[2];
      data[offset + 3] = color[3] === undefined ? 255 : color[3];
    }
  }
  return image;
}

/** Draw an ImageData scaled onto the plot rectangle (no smoothing). */
export function blit(ctx, image, plot) {
  const buffer = document.createElement('canvas');
  buffer.width = image.width;
  buffer.height = image.height;
  buffer.getContext('2d').putImageData(image, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(buffer, plot.x0, plot.y0, plot.x1 - plot.x0, plot.y1 - plot.y0);
}
