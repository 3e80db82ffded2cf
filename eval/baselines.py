# SPDX-License-Identifier: Apache-2.0
"""The evaluation's baseline detectors, scikit-learn's (and XGBoost's)
implementations, given the very feature table eacgm judged (`eacgm detect
--features`): every numeric feature of a call, standardised per function
(its z-score among the function's calls past warm-up; a feature the
function never carries is left out, a missing value is the function's mean).

Every method gives each call a score (higher: more anomalous), so that all
are compared at one operating point: each is cut where it flags as many of
the row's fault-free calls as eacgm flags (the same false-alarm rate), and
ranked whole for the area under its precision-recall curve (AUPRC).

Unsupervised (fitted per function on its calls past warm-up, at most
MAX_FIT of them evenly spaced, every call scored, as eacgm fits a model per
function; functions with fewer than MIN_OWN calls are pooled per layer, as
eacgm pools them), each scored as its library defines it:
  KMeans          k = 3; the distance to the nearest centroid
  IsolationForest 100 trees; minus scikit-learn's score_samples
  DBSCAN          min_samples 5, eps the 95th percentile of the distance to
                  the 5th neighbour (the k-distance rule); a call's distance
                  to its 5th neighbour among the fitted calls over eps
                  (DBSCAN's noise, made a score)
  OneClassSVM     RBF kernel, gamma "scale", nu 0.01; minus its decision
                  function
A score is made comparable across functions as a robust z-score within its
function (less the median, over 1.4826 median absolute deviations).
Supervised, given the labels (a reference beside the detectors, not a rival:
no detector has the labels), scored by 5-fold cross-validation over the
row's calls, stratified, seeded, their probability of the faulty class:
  RandomForest    100 trees, balanced class weights
  XGBoost         100 trees, depth 6, the classes weighted by their sizes,
                  where Debian has python3-xgboost
"""
import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.ensemble import IsolationForest, RandomForestClassifier
from sklearn.metrics import average_precision_score
from sklearn.model_selection import StratifiedKFold
from sklearn.neighbors import NearestNeighbors
from sklearn.svm import OneClassSVM

try:
    import xgboost
except ImportError:  # python3-xgboost is in scripts/setup.sh; said in RESULTS.md when absent
    xgboost = None

MIN_OWN = 20
MAX_FIT = 5000
UNSUPERVISED = ("KMeans", "IsolationForest", "DBSCAN", "OneClassSVM")
SUPERVISED = ("RandomForest", "XGBoost")


def standardise(x):
    """z-scores per column, the columns kept in place (aligned across
    functions); a column all NaN or constant is 0, and NaN -> 0 (the mean)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a column all NaN
        mu = np.nanmean(x, axis=0)
        sd = np.nanstd(x, axis=0)
        z = (x - mu) / np.where(sd > 0, sd, np.inf)
    return np.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0)


def matrix(rows, features):
    """Per-function standardised features of the rows (a list of dicts with
    "key" and "x", the feature values as floats or NaN), in the rows' order,
    and the groups each is fitted in (its function, or its layer's pool)."""
    by_key = {}
    for i, r in enumerate(rows):
        by_key.setdefault(r["key"], []).append(i)
    groups = {}
    for key, idx in by_key.items():
        g = key if len(idx) >= MIN_OWN else "pool:" + key.split("/")[0]
        groups.setdefault(g, []).extend(idx)
    z = np.zeros((len(rows), len(features)))
    for key, idx in by_key.items():
        z[idx] = standardise(np.array([rows[i]["x"] for i in idx], dtype=float))
    return z, groups


def _kmeans(fit, x, seed):
    km = KMeans(n_clusters=min(3, len(fit)), n_init=10, random_state=seed).fit(fit)
    return np.min(km.transform(x), axis=1)


def _dbscan(fit, x, _seed):
    k = min(5, len(fit))
    nn = NearestNeighbors(n_neighbors=k).fit(fit)
    dist, _ = nn.kneighbors(fit)
    eps = max(float(np.percentile(dist[:, -1], 95)), 1e-9)
    # DBSCAN(eps, min_samples=k) calls noise a point with fewer than k
    # neighbours within eps: this distance over eps is that rule made a
    # score (the clustering itself is not needed for it).
    d, _ = nn.kneighbors(x)
    return d[:, -1] / eps


def _iforest(fit, x, seed):
    return -IsolationForest(n_estimators=100, random_state=seed).fit(fit).score_samples(x)


def _ocsvm(fit, x, _seed):
    return -OneClassSVM(kernel="rbf", gamma="scale", nu=0.01).fit(fit).decision_function(x)


FIT = {"KMeans": _kmeans, "IsolationForest": _iforest, "DBSCAN": _dbscan, "OneClassSVM": _ocsvm}


def robust_z(s):
    med = np.median(s)
    mad = 1.4826 * np.median(np.abs(s - med))
    return (s - med) / (mad if mad > 0 else (np.std(s) or 1.0))


def unsupervised(rows, features, seed):
    """{method: score per row} over one run's rows (warm-up rows: -inf)."""
    live = [i for i, r in enumerate(rows) if not r["warmup"]]
    out = {m: np.full(len(rows), -np.inf) for m in UNSUPERVISED}
    if not live:
        return out
    z, groups = matrix([rows[i] for i in live], features)
    live = np.array(live)
    for idx in groups.values():
        if len(idx) < 3:
            continue
        x = z[idx]
        fit = x[np.linspace(0, len(x) - 1, min(len(x), MAX_FIT)).astype(int)]
        for m in UNSUPERVISED:
            out[m][live[idx]] = robust_z(np.asarray(FIT[m](fit, x, seed), dtype=float))
    return out


def cut_at(scores, negatives, n_false):
    """The score above which exactly n_false of the negatives' scores lie
    (as near as ties allow): a method flagging as many fault-free calls."""
    neg = np.sort(np.asarray(scores)[negatives])[::-1]
    if n_false <= 0:
        return neg[0] if len(neg) else np.inf
    if n_false >= len(neg):
        return -np.inf
    return neg[n_false]


def auprc(truth, scores):
    """Average precision (scikit-learn's step-wise area under the
    precision-recall curve) of scores against 0/1 truth."""
    s = np.nan_to_num(np.asarray(scores, dtype=float), neginf=-1e300, posinf=1e300)
    return float(average_precision_score(np.asarray(truth), s)) if sum(truth) else float("nan")


def supervised(x, y, seed):
    """{method: probability of the faulty class per row} by stratified
    5-fold cross-validation; a method that cannot run says why (a string)."""
    out = {}
    y = np.asarray(y)
    folds = min(5, int(y.sum()), int(len(y) - y.sum()))
    if folds < 2:
        return {m: "too few calls of one class for cross-validation" for m in SUPERVISED}
    weight = (len(y) - y.sum()) / y.sum()
    makers = {"RandomForest": lambda: RandomForestClassifier(n_estimators=100, class_weight="balanced",
                                                             random_state=seed, n_jobs=-1)}
    if xgboost is not None:
        makers["XGBoost"] = lambda: xgboost.XGBClassifier(n_estimators=100, max_depth=6, random_state=seed,
                                                          scale_pos_weight=weight, n_jobs=-1, verbosity=0)
    else:
        out["XGBoost"] = "python3-xgboost is not installed"
    for m, make in makers.items():
        prob = np.zeros(len(y))
        for train, test in StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed).split(x, y):
            prob[test] = make().fit(x[train], y[train]).predict_proba(x[test])[:, 1]
        out[m] = prob
    return out
