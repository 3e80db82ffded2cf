"""The evaluation's baseline detectors, scikit-learn's (and XGBoost's)
implementations, given the very feature table eacgm judged (`eacgm detect
--features`): every numeric feature of a call, standardised per function
(its z-score among the function's scored calls; a feature the function
never carries is left out, a missing value is the function's mean).

Unsupervised (fitted per function on its scored calls, as eacgm fits a
model per function; functions with fewer than MIN_OWN calls are pooled per
layer, as eacgm pools them), each with its library's usual settings:
  KMeans          k = 3, flags a call farther from its centroid than the
                  mean distance + 3 sd (the three-sigma rule)
  IsolationForest 100 trees, contamination "auto" (the paper's offset)
  DBSCAN          min_samples 5, eps the 95th percentile of the distance to
                  the 5th neighbour (the k-distance rule): noise is flagged
  OneClassSVM     RBF kernel, gamma "scale", nu 0.01
Supervised, given the labels (an upper bound no unsupervised detector has:
they are scored by 5-fold cross-validation over the row's calls, stratified,
seeded):
  RandomForest    100 trees, balanced class weights
  XGBoost         100 trees, depth 6, where Debian has python3-xgboost
"""
import warnings

import numpy as np
from sklearn.cluster import DBSCAN, KMeans
from sklearn.ensemble import IsolationForest, RandomForestClassifier
from sklearn.model_selection import StratifiedKFold
from sklearn.neighbors import NearestNeighbors
from sklearn.svm import OneClassSVM

try:
    import xgboost
except ImportError:  # python3-xgboost is in scripts/setup.sh; said in RESULTS.md when absent
    xgboost = None

MIN_OWN = 20
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
    "key" and the feature columns as floats or NaN), in the rows' order, and
    for each row the group it is fitted in (its function or its layer's pool)."""
    by_key = {}
    for i, r in enumerate(rows):
        by_key.setdefault(r["key"], []).append(i)
    groups = {}
    for key, idx in by_key.items():
        g = key if len(idx) >= MIN_OWN else "pool:" + key.split("/")[0]
        groups.setdefault(g, []).extend(idx)
    z = np.zeros((len(rows), len(features)))
    for key, idx in by_key.items():
        x = np.array([[r[f] for f in features] for r in (rows[i] for i in idx)], dtype=float)
        z[idx] = standardise(x)
    return z, groups


def _kmeans(x, seed):
    k = min(3, len(x))
    km = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(x)
    d = np.min(km.transform(x), axis=1)
    return d > d.mean() + 3 * d.std()


def _dbscan(x, _seed):
    k = min(5, len(x))
    dist, _ = NearestNeighbors(n_neighbors=k).fit(x).kneighbors(x)
    eps = max(float(np.percentile(dist[:, -1], 95)), 1e-9)
    return DBSCAN(eps=eps, min_samples=k).fit(x).labels_ == -1


def _iforest(x, seed):
    return IsolationForest(n_estimators=100, contamination="auto", random_state=seed).fit(x).predict(x) == -1


def _ocsvm(x, _seed):
    return OneClassSVM(kernel="rbf", gamma="scale", nu=0.01).fit(x).predict(x) == -1


FIT = {"KMeans": _kmeans, "IsolationForest": _iforest, "DBSCAN": _dbscan, "OneClassSVM": _ocsvm}


def unsupervised(rows, features, seed):
    """{method: [flag per row]} over one recording's scored rows."""
    z, groups = matrix(rows, features)
    out = {m: [False] * len(rows) for m in UNSUPERVISED}
    for idx in groups.values():
        if len(idx) < 3:
            continue
        x = z[idx]
        for m in UNSUPERVISED:
            for i, flag in zip(idx, FIT[m](x, seed)):
                out[m][i] = bool(flag)
    return out


def supervised(x, y, seed):
    """{method: [prediction per row]} by stratified 5-fold cross-validation;
    a method that cannot run says why in the value (a string)."""
    out = {}
    y = np.asarray(y)
    folds = min(5, int(y.sum()), int(len(y) - y.sum()))
    if folds < 2:
        return {m: "too few calls of one class for cross-validation" for m in SUPERVISED}
    makers = {"RandomForest": lambda: RandomForestClassifier(n_estimators=100, class_weight="balanced",
                                                             random_state=seed, n_jobs=-1)}
    if xgboost is not None:
        makers["XGBoost"] = lambda: xgboost.XGBClassifier(n_estimators=100, max_depth=6, random_state=seed,
                                                          n_jobs=-1, verbosity=0)
    else:
        out["XGBoost"] = "python3-xgboost is not installed"
    for m, make in makers.items():
        pred = np.zeros(len(y), dtype=bool)
        for train, test in StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed).split(x, y):
            pred[test] = make().fit(x[train], y[train]).predict(x[test]) == 1
        out[m] = list(pred)
    return out
