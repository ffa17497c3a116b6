// Unit tests of grouping by labels in src/profileopts.js (node --test tests/profileopts_labels.test.mjs).
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';

import { parseGroupBy, groupByShort, GROUP_BY_SHORT, labelGroupOptions, isLabelGroup } from '../src/profileopts.js';

describe('group by labels', () => {
  it('keeps labels.<name> after the frame fields, once each, the default frame field when none', () => {
    assert.deepEqual(parseGroupBy('labels.endpoint'), ['function_name', 'labels.endpoint']);
    assert.deepEqual(parseGroupBy('labels.region,mapping_file,labels.endpoint,labels.region'),
      ['mapping_file', 'labels.region', 'labels.endpoint']);
    assert.deepEqual(parseGroupBy('labels.,labels.a b,bogus'), ['function_name']);
    assert.deepEqual(parseGroupBy('location_address,bogus'), ['location_address']);
  });
  it('names a label group by its label on the button', () => {
    assert.equal(groupByShort('labels.endpoint'), 'endpoint');
    assert.equal(GROUP_BY_SHORT['labels.endpoint'], 'endpoint');
    assert.equal(GROUP_BY_SHORT.mapping_file, 'binary');
    assert.equal(groupByShort('function_name'), 'function');
  });
  it('offers the Labels API names as menu entries', () => {
    assert.deepEqual(labelGroupOptions(['job', '__name__', 'endpoint', 'job']),
      [['labels.endpoint', 'Label: endpoint'], ['labels.job', 'Label: job']]);
    assert.deepEqual(labelGroupOptions(null), []);
    assert.equal(isLabelGroup('labels.a,b'), false);
  });
});
