"""The reference engine's suffix trees against arctic-inference's (the package vLLM's suffix decoding
runs), on random token streams with heavy repetition: the same draft and score for every query, with
prompt trees only, and with a growing response in the shared tree across three requests (the local
tree's draft wins a tie, as the drafter does)."""
import numpy as np
import pytest

from speedbench.drafters.suffix import SuffixTrie

arctic = pytest.importorskip("arctic_inference.suffix_decoding",
                             reason="arctic-inference is not installed (bash scripts/install.sh suffix builds it)")


def test_prompt_trees_draft_as_arctic_inference_does():
    rng = np.random.default_rng(0)
    for _ in range(300):
        depth, vocab = int(rng.integers(2, 12)), int(rng.integers(2, 6))
        prompt = rng.integers(0, vocab, size=int(rng.integers(5, 60))).tolist()
        context = (prompt + rng.integers(0, vocab, size=int(rng.integers(0, 10))).tolist())[-depth:]
        k, factor, floor = int(rng.integers(1, 9)), float(rng.choice([0.5, 1.0, 2.0])), float(rng.choice([0.0, 0.1, 0.3]))
        cache = arctic.SuffixDecodingCache(depth, 0)
        cache.start_request("r", prompt)
        theirs = cache.speculate("r", context, max_spec_tokens=k, max_spec_factor=factor, min_token_prob=floor)
        trie = SuffixTrie(depth)
        trie.extend(0, prompt)
        draft, score = trie.speculate(list(context), k, factor, floor)
        assert draft == list(theirs.token_ids) and score == pytest.approx(theirs.score, abs=1e-5)


def test_growing_responses_in_the_shared_tree_draft_as_arctic_inference_does():
    rng = np.random.default_rng(1)
    for _ in range(60):
        depth, vocab = int(rng.integers(2, 10)), int(rng.integers(2, 5))
        cache, shared = arctic.SuffixDecodingCache(depth, -1), SuffixTrie(depth)
        for req in range(3):
            prompt = rng.integers(0, vocab, size=int(rng.integers(3, 30))).tolist()
            cache.start_request(req, prompt)
            local, seq = SuffixTrie(depth), list(prompt)
            local.extend(0, prompt)
            for _ in range(6):
                new = rng.integers(0, vocab, size=int(rng.integers(1, 4))).tolist()
                cache.add_active_response(req, new)
                seq += new
                local.extend(0, new)
                shared.extend(req, new)
                k = int(rng.integers(1, 8))
                theirs = cache.speculate(req, seq[-depth:], max_spec_tokens=k)
                mine, mine_score = local.speculate(seq[-depth:], k, 1.0, 0.1)
                other, other_score = shared.speculate(seq[-depth:], k, 1.0, 0.1)
                assert (other if other_score > mine_score else mine) == list(theirs.token_ids)
            cache.stop_request(req)
